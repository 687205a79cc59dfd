#!/bin/bash
# guest-run.sh [OPTIONS] [--] COMMAND [ARGS...]
#
# Boots a small virtual machine on Debian's own kernel (linux-image-amd64), whose root file
# system is this host's, shared read-only over 9p with a tmpfs overlay, runs COMMAND in it
# (in the current directory, as root) and exits with COMMAND's status. The guest's kernel
# has the modules this host's lacks: soft-RoCE (rdma_rxe), so the verbs wire and UCX's
# rc_verbs/ud_verbs run on real verbs there (contrib/guest-rxe-hosts.sh makes RDMA "hosts").
#
#   --rw DIR        share DIR read-write at the same path (repeatable; default: the current
#                   directory). Everything else the guest writes stays in its memory.
#   --timeout SECS  kill the guest after SECS (default 1800); status 124 then
#   --cpus N        virtual CPUs (default: this host's count)
#   --mem MB        guest memory (default 4096)
#
# Environment: PTL_GUEST_ACCEL=auto|kvm|tcg (auto: KVM where it can boot a stock kernel,
# else qemu's software emulation, which is slower but runs anywhere), PTL_GUEST_KERNEL_ARGS
# (added to the guest kernel's command line); COMMAND sees PATH,
# HOME and every PTL_*, UCX_*, PORTALS_UCX_*, GTEST_*, OMPI_* and MPICH variable set here.
# The kernel, its modules and the initramfs are built once into
# $PORTALS_UCX_CACHE/guest-<key> (key: this script, the kernel package and busybox versions).
# qemu never outlives this script. Exit status 77 when no virtual machine can run here.
set -eo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${PORTALS_UCX_CACHE:-$HOME/.cache/portals-ucx}
usage="usage: $0 [--rw DIR]... [--timeout SECS] [--cpus N] [--mem MB] [--] COMMAND [ARGS...]"

rw=()
timeout=1800
cpus=$(nproc)
mem=4096
while [ $# -gt 0 ]; do
  case $1 in
    --rw) rw+=("$(cd "$2" && pwd)"); shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --) shift; break ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
[ ${#rw[@]} -gt 0 ] || rw=("$PWD")
for d in "${rw[@]}"; do
  case $d in *[[:space:],]*) echo "guest-run: shared paths cannot hold spaces or commas: $d" >&2; exit 2 ;; esac
done

for tool in qemu-system-x86_64 busybox cpio depmod modprobe; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "guest-run: $tool is missing (apt-get install qemu-system-x86 busybox-static cpio kmod); skipping" >&2
    exit 77
  }
done

# --- the guest's kernel and initramfs, built once -------------------------------------------
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$kpkg" ] || { echo "guest-run: apt-cache knows no linux-image-amd64 (apt-get update?)" >&2; exit 1; }
kver=$(apt-cache policy "$kpkg" | awk '/Candidate:/ {print $2}')
key=$( {
  cat "$here/guest-run.sh"
  echo "$kpkg $kver"
  dpkg-query -W -f='${Version}\n' busybox-static
} | sha256sum | cut -c1-12)
gdir=$cache/guest-$key
release=${kpkg#linux-image-}

build_guest() {
  local tmp=$gdir.tmp
  rm -rf "$tmp" && mkdir -p "$tmp/pkg" "$tmp/initrd"/{bin,mods,proc,sys,dev,lower,rw,newroot}
  echo "guest-run: building the guest (kernel $kpkg $kver) in $gdir" >&2
  (cd "$tmp/pkg" && apt-get download -q "$kpkg=$kver" >/dev/null 2>&1) ||
    { echo "guest-run: apt-get download $kpkg=$kver failed" >&2; exit 1; }
  dpkg-deb -x "$tmp/pkg"/*.deb "$tmp/kernel"
  rm -rf "$tmp/pkg"
  depmod -b "$tmp/kernel" "$release"
  cp /usr/bin/busybox "$tmp/initrd/bin/"
  # What the initramfs loads before it can see the host: virtio, 9p and overlayfs.
  local m f insmods=""
  for m in virtio_pci 9pnet_virtio 9p overlay; do
    modprobe --show-depends -d "$tmp/kernel" -S "$release" "$m"
  done | awk '$1 == "insmod" && !seen[$2]++ {print $2}' > "$tmp/modlist"
  while read -r f; do
    cp "$f" "$tmp/initrd/mods/"
    insmods="$insmods /mods/$(basename "$f")"
  done < "$tmp/modlist"
  sed -e "s|@INSMODS@|$insmods|" -e "s|@RELEASE@|$release|g" > "$tmp/initrd/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
fail() { echo "guest-run (guest): $*"; poweroff -f; }
for m in @INSMODS@; do insmod "$m" || fail "insmod $m"; done
arg() { tr ' ' '\n' < /proc/cmdline | sed -n "s/^ptl\.$1=//p"; }
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000 hostroot /lower || fail "no host root"
mount -t tmpfs -o size=60% tmpfs /rw
mkdir /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot ||
  fail "overlayfs over the host root"
i=0
for d in $(arg rw | tr , ' '); do
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 "rw$i" "/newroot$d" || fail "share $d"
  i=$((i + 1))
done
job=$(arg job)
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 job "/newroot$job" || fail "job directory"
mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t devtmpfs dev /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
mount -t tmpfs tmpfs /newroot/dev/shm
mount -t tmpfs tmpfs /newroot/run
kdir=$(arg kernel)
mkdir -p "/newroot/lib/modules/@RELEASE@"
mount --bind "/newroot$kdir/lib/modules/@RELEASE@" "/newroot/lib/modules/@RELEASE@" ||
  fail "kernel modules"
hostname guest
touch "/newroot$job/booted"
# PID 1 must live in the new root: the kernel runs modprobe for module autoloading (bridge,
# veth, ...) from PID 1's root.
exec switch_root /newroot /bin/sh -c "/bin/sh $job/run.sh < /dev/console > /dev/console 2>&1
echo \$? > $job/status
sync
exec busybox poweroff -f"
INIT
  chmod +x "$tmp/initrd/init"
  (cd "$tmp/initrd" && find . | cpio -o -H newc 2>/dev/null | gzip -1) > "$tmp/initrd.gz"
  rm -rf "$tmp/initrd" "$tmp/modlist"
  for old in "$cache"/guest-????????????; do
    if [ -d "$old" ] && [ "$old" != "$gdir" ]; then rm -rf "$old"; fi
  done
  mv "$tmp" "$gdir"
}
[ -f "$gdir/initrd.gz" ] || build_guest

# --- the job -----------------------------------------------------------------------------
job=$(mktemp -d "${TMPDIR:-/tmp}/guest-run.XXXXXX")
qpid=""
cleanup() {
  local rc=$?
  if [ -n "$qpid" ]; then kill -9 "$qpid" 2>/dev/null; wait "$qpid" 2>/dev/null; fi
  rm -rf "$job"
  return $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
{
  echo "cd $(printf %q "$PWD") || exit 1"
  echo "export HOME=/root LANG=C.UTF-8 PATH=$(printf %q "$PATH")"
  # (grep finds nothing in a plain environment: not a failure)
  { env | grep -E '^(PTL_|UCX_|PORTALS_UCX_|GTEST_|OMPI_|MPICH|HYDRA_)' || true; } | while IFS= read -r kv; do
    echo "export ${kv%%=*}=$(printf %q "${kv#*=}")"
  done
  printf 'exec'
  printf ' %q' "$@"
  echo
} > "$job/run.sh"

accel=${PTL_GUEST_ACCEL:-auto}
if [ "$accel" = auto ]; then
  accel=tcg
  # A PVM host (kvm_pvm) runs only guests built for it; Debian's kernel hangs in its
  # decompressor there.
  [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ] && accel=kvm
fi

boot() {
  local a=$1 cpu tags="" i=0 d
  case $a in
    kvm) cpu="-accel kvm -cpu host" ;;
    tcg) cpu="-accel tcg,thread=multi -cpu max" ;;
    *) echo "guest-run: PTL_GUEST_ACCEL=$a: use auto, kvm or tcg" >&2; exit 2 ;;
  esac
  local share=(-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
    -virtfs "local,path=$job,mount_tag=job,security_model=none")
  for d in "${rw[@]}"; do
    share+=(-virtfs "local,path=$d,mount_tag=rw$i,security_model=none,multidevs=remap")
    i=$((i + 1))
  done
  tags=$(IFS=,; echo "${rw[*]}")
  rm -f "$job/booted" "$job/status" "$job/console"
  mkfifo "$job/console"
  # The serial console ends lines with CR LF; line-buffered, so a log shows progress.
  sed -u 's/\r$//' < "$job/console" &
  # shellcheck disable=SC2086
  qemu-system-x86_64 $cpu -smp "$cpus" -m "$mem" -nodefaults -no-reboot -display none \
    -chardev stdio,id=con,signal=off -serial chardev:con \
    -kernel "$gdir/kernel/boot/vmlinuz-$release" -initrd "$gdir/initrd.gz" \
    -append "console=ttyS0 quiet loglevel=1 panic=-1 ptl.job=$job ptl.rw=$tags ptl.kernel=$gdir/kernel ${PTL_GUEST_KERNEL_ARGS:-}" \
    "${share[@]}" < /dev/null > "$job/console" 2> "$job/qemu.err" &
  qpid=$!
}

wait_guest() {
  local a=$1 boot_limit=$2 t=0
  while kill -0 "$qpid" 2>/dev/null; do
    if [ ! -f "$job/booted" ] && [ "$t" -ge "$boot_limit" ]; then return 2; fi
    if [ "$t" -ge "$timeout" ]; then return 124; fi
    sleep 1
    t=$((t + 1))
  done
  wait "$qpid" 2>/dev/null || true
  qpid=""
  [ -f "$job/booted" ] || { echo "guest-run: the $a guest did not boot:" >&2; cat "$job/qemu.err" >&2; return 3; }
}

set +e
boot "$accel"
wait_guest "$accel" 60
rc=$?
if [ $rc -eq 2 ] || { [ $rc -eq 3 ] && [ "$accel" = kvm ]; }; then
  kill -9 "$qpid" 2>/dev/null; wait "$qpid" 2>/dev/null; qpid=""
  [ "$accel" = kvm ] || { echo "guest-run: the guest did not boot within 60 s" >&2; exit 1; }
  echo "guest-run: KVM cannot boot Debian's kernel here; using software emulation (PTL_GUEST_ACCEL=tcg)" >&2
  accel=tcg
  boot tcg
  wait_guest tcg 120
  rc=$?
fi
set -e
case $rc in
  0) ;;
  124)
    echo "guest-run: timed out after $timeout s" >&2
    kill -9 "$qpid" 2>/dev/null || true
    wait "$qpid" 2>/dev/null || true
    qpid=""
    exit 124 ;;
  *) exit 1 ;;
esac
[ -f "$job/status" ] || { echo "guest-run: the guest stopped without a status" >&2; exit 1; }
exit "$(cat "$job/status")"
