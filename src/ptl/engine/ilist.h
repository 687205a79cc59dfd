// A minimal intrusive doubly linked list: O(1) unlink from the middle, which matching needs
// when an entry or unexpected header leaves its list.
#pragma once

namespace ptl {

struct IHook {
    IHook *prev = nullptr;
    IHook *next = nullptr;
    void *owner = nullptr;
    bool linked() const { return prev != nullptr; }
};

template <typename T, IHook T::*H>
class IList {
public:
    IList() { head_.prev = head_.next = &head_; }
    IList(const IList &) = delete;
    IList &operator=(const IList &) = delete;
    IList(IList &&o) noexcept { take(o); }
    IList &operator=(IList &&o) noexcept { take(o); return *this; }

    bool empty() const { return head_.next == &head_; }
    void push_back(T *t) {
        IHook *h = &(t->*H);
        h->owner = t;
        h->prev = head_.prev;
        h->next = &head_;
        head_.prev->next = h;
        head_.prev = h;
    }
    static void erase(T *t) {
        IHook *h = &(t->*H);
        h->prev->next = h->next;
        h->next->prev = h->prev;
        h->prev = h->next = nullptr;
    }
    T *front() const { return empty() ? nullptr : from(head_.next); }
    T *next(T *t) const {
        IHook *n = (t->*H).next;
        return n == &head_ ? nullptr : from(n);
    }

private:
    static T *from(IHook *h) { return static_cast<T *>(h->owner); }
    void take(IList &o) {
        if (o.empty()) {
            head_.prev = head_.next = &head_;
            return;
        }
        head_.next = o.head_.next;
        head_.prev = o.head_.prev;
        head_.next->prev = &head_;
        head_.prev->next = &head_;
        o.head_.prev = o.head_.next = &o.head_;
    }
    IHook head_;
};

}  // namespace ptl
