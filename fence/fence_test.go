package fence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
)

func TestModeAdmits(t *testing.T) {
	for _, tc := range []struct {
		mode           fence.Mode
		token, highest lease.Token
		want           bool
	}{
		{fence.AtLeast, 1, 0, true},
		{fence.AtLeast, 2, 2, true},
		{fence.AtLeast, 1, 2, false},
		{fence.Strict, 1, 0, true},
		{fence.Strict, 2, 2, false},
		{fence.Strict, 3, 2, true},
		{fence.Strict, 1, 2, false},
	} {
		if got := tc.mode.Admits(tc.token, tc.highest); got != tc.want {
			t.Errorf("%v.Admits(%d, %d) = %v, want %v", tc.mode, tc.token, tc.highest, got, tc.want)
		}
	}
}

func TestResourceRejectsStaleAndChangesNothing(t *testing.T) {
	for _, mode := range []fence.Mode{fence.AtLeast, fence.Strict} {
		t.Run(mode.String(), func(t *testing.T) {
			r := fence.NewResource("job", "initial", mode)
			if err := r.Write(2, "written-by-b"); err != nil {
				t.Fatal(err)
			}
			err := r.Write(1, "late-write-by-a")
			var stale *fence.StaleTokenError
			if !errors.As(err, &stale) || !errors.Is(err, lease.ErrStaleToken) {
				t.Fatalf("late write: err = %v, want *StaleTokenError matching ErrStaleToken", err)
			}
			if stale.Resource != "job" || stale.Token != 1 || stale.Highest != 2 || stale.Mode != mode {
				t.Errorf("StaleTokenError = %+v", stale)
			}
			if v, last := r.Read(); v != "written-by-b" || last != 2 {
				t.Errorf("after a rejected write: value=%s lastToken=%d", v, last)
			}
			// The same token again: AtLeast admits it, Strict (the seed's rule) does not.
			err = r.Write(2, "second-write-by-b")
			if mode == fence.AtLeast && err != nil {
				t.Errorf("AtLeast rejected a second write with the same token: %v", err)
			}
			if mode == fence.Strict && !errors.Is(err, lease.ErrStaleToken) {
				t.Errorf("Strict admitted a second write with the same token: %v", err)
			}
		})
	}
}

func TestResourceInvalidTokens(t *testing.T) {
	r := fence.NewResource("job", 0, fence.AtLeast)
	for _, tok := range []lease.Token{0, lease.MaxToken + 1, ^lease.Token(0)} {
		if err := r.Write(tok, 1); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Write(%d): err = %v, want ErrInvalid", tok, err)
		}
	}
	if v, last := r.Read(); v != 0 || last != 0 {
		t.Errorf("invalid tokens changed the resource: %d, %d", v, last)
	}
}

func TestResourceUpdateFailureChangesNothing(t *testing.T) {
	r := fence.NewResource("counter", 10, fence.AtLeast)
	boom := errors.New("boom")
	if err := r.Update(5, func(int) (int, error) { return 99, boom }); !errors.Is(err, boom) {
		t.Fatalf("Update: %v", err)
	}
	if v, last := r.Read(); v != 10 || last != 0 {
		t.Errorf("failed update changed the resource: value=%d lastToken=%d", v, last)
	}
}

// Concurrent writers with interleaved tokens: every accepted write is at
// least as new as every write accepted before it.
func TestConcurrentWritersNeverRegress(t *testing.T) {
	for _, mode := range []fence.Mode{fence.AtLeast, fence.Strict} {
		r := fence.NewResource("job", lease.Token(0), mode)
		g := fence.NewMemory(mode)
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			accepted []lease.Token // in acceptance order, via the guard
		)
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 200 {
					tok := lease.Token(1 + (i*16+w)%97)
					_ = r.Write(tok, tok)
					_ = g.Check(context.Background(), "job", tok, func() error {
						mu.Lock()
						accepted = append(accepted, tok)
						mu.Unlock()
						return nil
					})
				}
			}()
		}
		wg.Wait()
		for i := 1; i < len(accepted); i++ {
			if !mode.Admits(accepted[i], accepted[i-1]) {
				t.Fatalf("%v: token %d accepted after %d", mode, accepted[i], accepted[i-1])
			}
		}
		if v, last := r.Read(); v != last {
			t.Errorf("%v: value %d does not come from the newest accepted token %d", mode, v, last)
		}
		if got := g.Highest("job"); got != 97 {
			t.Errorf("%v: highest = %d, want 97", mode, got)
		}
	}
}

func TestMemoryGuard(t *testing.T) {
	ctx := context.Background()
	g := fence.NewMemory(fence.AtLeast)
	ran := 0
	write := func() error { ran++; return nil }
	if err := g.Check(ctx, "a", 2, write); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx, "a", 1, write); !errors.Is(err, lease.ErrStaleToken) {
		t.Fatalf("stale Check: err = %v", err)
	}
	if ran != 1 {
		t.Errorf("write ran %d times, want 1: a rejected Check must not run it", ran)
	}
	// Resources are independent.
	if err := g.Check(ctx, "b", 1, write); err != nil {
		t.Errorf("token 1 on another resource: %v", err)
	}
	// A failed write records nothing.
	if err := g.Check(ctx, "a", 5, func() error { return errors.New("disk full") }); err == nil {
		t.Fatal("failed write reported success")
	}
	if got := g.Highest("a"); got != 2 {
		t.Errorf("highest after a failed write = %d, want 2", got)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := g.Check(cctx, "a", 9, write); !errors.Is(err, context.Canceled) {
		t.Errorf("Check with a cancelled context: %v", err)
	}
	if err := g.Check(ctx, "a", 0, write); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("Check with token 0: %v", err)
	}
}

func ExampleResource() {
	r := fence.NewResource("job", "initial", fence.AtLeast)
	fmt.Println(r.Write(2, "written-by-b"))
	fmt.Println(r.Write(1, "late-write-by-a"))
	v, last := r.Read()
	fmt.Printf("value=%s lastToken=%d\n", v, last)
	// Output:
	// <nil>
	// fence: stale token 1 for "job": highest accepted is 2 (mode at-least)
	// value=written-by-b lastToken=2
}
