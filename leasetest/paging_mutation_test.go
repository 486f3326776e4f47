package leasetest_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/leasehq/lease"
)

func init() { mutants = append(mutants, pagingMutants...) }

// paged installs a List that pages memstore's whole list under prefix with
// cut, after checking the arguments with check (lease.ParseList if nil).
// cut gets the leases after the cursor's key, in order, and the limit.
func paged(w *wrapper, check func(prefix string, p lease.Page) (int, string, error), cut func(ls []lease.Lease, limit int) lease.ListPage) {
	if check == nil {
		check = lease.ParseList
	}
	w.h.page = func(ctx context.Context, prefix string, p lease.Page) (lease.ListPage, error) {
		limit, after, err := check(prefix, p)
		if err != nil {
			return lease.ListPage{}, err
		}
		ls, err := memList(ctx, w.s, prefix)
		if err != nil {
			return lease.ListPage{}, err
		}
		return cut(slices.DeleteFunc(ls, func(l lease.Lease) bool { return l.Key <= after }), limit), nil
	}
}

// honest is the right cut, for mutants that break something else.
func honest(ls []lease.Lease, limit int) lease.ListPage {
	return lease.PageOf(ls[:min(len(ls), limit+1)], limit)
}

// utf16Compare orders strings by UTF-16 code units, as JavaScript and some
// databases do.
func utf16Compare(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

var pagingMutants = []mutant{
	{name: "PageSkipsAtBoundary", breaks: "Next continues after the first lease of the next page, which no page shows",
		caughtBy: []string{"ListPageBoundaries"},
		install: func(w *wrapper) {
			paged(w, nil, func(ls []lease.Lease, limit int) lease.ListPage {
				if len(ls) <= limit {
					return lease.ListPage{Leases: ls}
				}
				return lease.ListPage{Leases: ls[:limit], Next: lease.Cursor(ls[limit].Key)}
			})
		}},
	{name: "PageRepeatsAtBoundary", breaks: "Next continues after the page's last lease but one, which the next page shows again",
		caughtBy: []string{"ListPageBoundaries"},
		install: func(w *wrapper) {
			paged(w, nil, func(ls []lease.Lease, limit int) lease.ListPage {
				p := honest(ls, limit)
				if p.Next != "" && limit > 1 {
					p.Next = lease.Cursor(ls[limit-2].Key)
				}
				return p
			})
		}},
	{name: "PageCursorIsOffset", breaks: "the cursor counts leases instead of naming a key: keys taken or freed before it shift the walk",
		caughtBy: []string{"ListWalkUnderChurn"},
		install: func(w *wrapper) {
			w.h.page = func(ctx context.Context, prefix string, p lease.Page) (lease.ListPage, error) {
				limit, after, err := lease.ParseList(prefix, p)
				if err != nil {
					return lease.ListPage{}, err
				}
				skip, _ := strconv.Atoi(strings.TrimPrefix(after, "#"))
				ls, err := memList(ctx, w.s, prefix)
				if err != nil {
					return lease.ListPage{}, err
				}
				ls = ls[min(skip, len(ls)):]
				if len(ls) <= limit {
					return lease.ListPage{Leases: ls}, nil
				}
				return lease.ListPage{Leases: ls[:limit], Next: lease.Cursor("#" + strconv.Itoa(skip+limit))}, nil
			}
		}},
	{name: "PageLimitIgnored", breaks: "a page holds every lease after the cursor, whatever the limit",
		caughtBy: []string{"ListPageLimits", "ListPageBoundaries"},
		install: func(w *wrapper) {
			paged(w, nil, func(ls []lease.Lease, _ int) lease.ListPage { return lease.ListPage{Leases: ls} })
		}},
	{name: "PageZeroLimitUnbounded", breaks: "limit 0 means no limit instead of DefaultPageLimit",
		caughtBy: []string{"ListPageLimits"},
		install: func(w *wrapper) {
			paged(w, func(prefix string, p lease.Page) (int, string, error) {
				zero := p.Limit == 0
				limit, after, err := lease.ParseList(prefix, p)
				if zero {
					limit = 1 << 30
				}
				return limit, after, err
			}, honest)
		}},
	{name: "PageBadLimitClamped", breaks: "a negative limit or one above MaxPageLimit is clamped instead of refused",
		caughtBy: []string{"ListPageLimits"},
		install: func(w *wrapper) {
			paged(w, func(prefix string, p lease.Page) (int, string, error) {
				p.Limit = min(max(p.Limit, 1), lease.MaxPageLimit)
				return lease.ParseList(prefix, p)
			}, honest)
		}},
	{name: "PageBadCursorRestarts", breaks: "a malformed cursor starts the walk over instead of being refused",
		caughtBy: []string{"ListPageBadInput"},
		install: func(w *wrapper) {
			paged(w, func(prefix string, p lease.Page) (int, string, error) {
				limit, after, err := lease.ParseList(prefix, p)
				if err != nil {
					p.After = ""
					limit, after, err = lease.ParseList(prefix, p)
				}
				return limit, after, err
			}, honest)
		}},
	{name: "PageBadPrefixAccepted", breaks: "List does not check its prefix",
		caughtBy: []string{"ListPageBadInput"},
		install: func(w *wrapper) {
			w.h.page = func(ctx context.Context, prefix string, p lease.Page) (lease.ListPage, error) {
				limit, after, err := lease.ParseList("", p)
				if err != nil {
					return lease.ListPage{}, err
				}
				ls, err := memList(ctx, w.s, "")
				ls = slices.DeleteFunc(ls, func(l lease.Lease) bool { return l.Key <= after || !strings.HasPrefix(l.Key, prefix) })
				return honest(ls, limit), err
			}
		}},
	{name: "PageNextOnLastPage", breaks: "a full last page has a Next, so every walk ends with an empty page",
		caughtBy: []string{"ListPageBoundaries"},
		install: func(w *wrapper) {
			paged(w, nil, func(ls []lease.Lease, limit int) lease.ListPage {
				p := honest(ls, limit)
				if len(p.Leases) == limit {
					p.Next = lease.Cursor(p.Leases[limit-1].Key)
				}
				return p
			})
		}},
	{name: "PageNextMissingForLastOne", breaks: "Next is empty when a single lease is left after the page: the walk ends early",
		caughtBy: []string{"ListPageLimits"},
		install: func(w *wrapper) {
			paged(w, nil, func(ls []lease.Lease, limit int) lease.ListPage {
				p := honest(ls, limit)
				if len(ls) == limit+1 {
					p.Next = ""
				}
				return p
			})
		}},
	{name: "PageUTF16Order", breaks: "pages go in UTF-16 order, as a JavaScript store would, not in byte order",
		caughtBy: []string{"ListPageBoundaries"},
		install: func(w *wrapper) {
			w.h.page = func(ctx context.Context, prefix string, p lease.Page) (lease.ListPage, error) {
				limit, after, err := lease.ParseList(prefix, p)
				if err != nil {
					return lease.ListPage{}, err
				}
				ls, err := memList(ctx, w.s, prefix)
				if err != nil {
					return lease.ListPage{}, err
				}
				slices.SortFunc(ls, func(a, b lease.Lease) int { return utf16Compare(a.Key, b.Key) })
				ls = slices.DeleteFunc(ls, func(l lease.Lease) bool { return after != "" && utf16Compare(l.Key, after) <= 0 })
				return honest(ls, limit), nil
			}
		}},
	{name: "PageCursorDropsNonASCII", breaks: "the cursor keeps only the ASCII bytes of the key it continues after",
		caughtBy: []string{"ListPageBoundaries"},
		install: func(w *wrapper) {
			paged(w, nil, func(ls []lease.Lease, limit int) lease.ListPage {
				p := honest(ls, limit)
				if p.Next != "" {
					ascii := strings.Map(func(r rune) rune {
						if r >= 0x80 {
							return -1
						}
						return r
					}, p.Leases[limit-1].Key)
					p.Next = lease.Cursor(ascii)
				}
				return p
			})
		}},
	{name: "PagePrefixDroppedAfterCursor", breaks: "pages after the first list every key after the cursor, under the prefix or not",
		caughtBy: []string{"ListPageBoundaries"},
		install: func(w *wrapper) {
			w.h.page = func(ctx context.Context, prefix string, p lease.Page) (lease.ListPage, error) {
				if p.After != "" {
					prefix = ""
				}
				limit, after, err := lease.ParseList(prefix, p)
				if err != nil {
					return lease.ListPage{}, err
				}
				ls, err := memList(ctx, w.s, prefix)
				if err != nil {
					return lease.ListPage{}, fmt.Errorf("list: %w", err)
				}
				return honest(slices.DeleteFunc(ls, func(l lease.Lease) bool { return l.Key <= after }), limit), nil
			}
		}},
}
