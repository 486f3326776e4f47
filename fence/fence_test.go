package fence_test

import (
	"errors"
	"fmt"
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

func TestValidateMode(t *testing.T) {
	for _, m := range []fence.Mode{fence.AtLeast, fence.Strict} {
		if err := fence.ValidateMode(m); err != nil {
			t.Errorf("ValidateMode(%v) = %v", m, err)
		}
	}
	for _, m := range []fence.Mode{-1, 2, 7} {
		if err := fence.ValidateMode(m); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("ValidateMode(%v) = %v, want ErrInvalid", m, err)
		}
	}
}

// TestResourceUpdateFailureChangesNothing: the value f returns with its
// error is dropped (guardtest checks that the token is not recorded).
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
