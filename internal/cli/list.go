package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
)

func newListCommand(a *app) *cobra.Command {
	var (
		rf     remoteFlags
		prefix string
		page   lease.Page
	)
	cmd := &cobra.Command{
		Use:   "list [--prefix P] [--limit N] [--after CURSOR]",
		Short: "Print the current leases, one per line, ordered by key",
		Long: fmt.Sprintf(`list prints the current unexpired leases whose keys start with --prefix
(all of them by default), without their secret ids, in byte order of their
keys.

By default it walks every page of the server's list, %d leases a request
(--timeout applies to each request), and prints them all: a lease held
throughout the walk is printed exactly once. With --limit N it prints one
page of at most N leases (1 to %d) and, if more follow, the cursor that
continues after them: on stderr as "next: --after CURSOR", or as "next" in
-o json's {"leases":[...],"next":"CURSOR"} ("" on the last page). --after
CURSOR starts after the page that gave it.

`, lease.DefaultPageLimit, lease.MaxPageLimit) + remoteEnvHelp + "\n\n" + exitCodesHelp,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			limited := cmd.Flags().Changed("limit")
			if limited && page.Limit == 0 {
				return usageError(fmt.Errorf("--limit must be from 1 to %d, got 0", lease.MaxPageLimit))
			}
			if _, _, err := lease.ParseList(prefix, page); err != nil {
				return usageError(err)
			}
			b, err := rf.oneShot(a)
			if err != nil {
				return err
			}
			defer closeBackend(b)
			list := func(p lease.Page) (lease.ListPage, error) {
				ctx, cancel := context.WithTimeout(cmd.Context(), rf.timeout)
				defer cancel()
				return b.List(ctx, prefix, p)
			}
			if limited {
				p, err := list(page)
				if err != nil {
					return err
				}
				return writePage(a.stdout, a.stderr, p, rf.json())
			}
			var all []lease.Lease
			_, last, _ := lease.ParseList(prefix, page) // the key --after names; checked above
			for {
				p, err := list(page)
				if err != nil {
					return err
				}
				// A page that does not move on (a broken server, a proxy
				// that drops the query) would be printed again and again.
				if len(p.Leases) > 0 && page.After != "" && p.Leases[0].Key <= last {
					return fmt.Errorf("%w: list: asked for the leases after %q, the server answered from %q on", lease.ErrUnavailable, last, p.Leases[0].Key)
				}
				if !rf.json() {
					// Text goes out page by page; JSON is one object.
					if err := writeLeases(a.stdout, p.Leases, false); err != nil {
						return err
					}
				} else {
					all = append(all, p.Leases...)
				}
				if p.Next == "" {
					break
				}
				_, next, err := lease.ParseList("", lease.Page{After: p.Next})
				if err != nil || next <= last {
					return fmt.Errorf("%w: list: the server's next cursor %q does not move past %q", lease.ErrUnavailable, p.Next, last)
				}
				page.After, last = p.Next, next
			}
			if rf.json() {
				return writeLeases(a.stdout, all, true)
			}
			return nil
		},
	}
	rf.add(cmd, true)
	cmd.Flags().StringVar(&prefix, "prefix", "", "only keys that start with `PREFIX`")
	cmd.Flags().IntVar(&page.Limit, "limit", 0, "print one page of at most `N` leases and the cursor after it")
	cmd.Flags().StringVar(&page.After, "after", "", "start after the page whose next cursor is `CURSOR`")
	return cmd
}

// writePage prints one page of a list: in JSON as the HTTP API's answer,
// in text as lease lines with the cursor on stderr.
func writePage(stdout, stderr io.Writer, p lease.ListPage, asJSON bool) error {
	if asJSON {
		out := struct {
			Leases []leasehttp.LeaseJSON `json:"leases"`
			Next   string                `json:"next"`
		}{Leases: make([]leasehttp.LeaseJSON, 0, len(p.Leases)), Next: p.Next}
		for _, l := range p.Leases {
			out.Leases = append(out.Leases, toJSON(l))
		}
		return writeJSON(stdout, out)
	}
	if err := writeLeases(stdout, p.Leases, false); err != nil {
		return err
	}
	if p.Next != "" {
		_, err := fmt.Fprintf(stderr, "next: --after %s\n", p.Next)
		return err
	}
	return nil
}
