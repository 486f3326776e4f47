package chaos_test

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/tools/chaos"
)

// The models must tell legal histories from illegal ones, or a passing
// chaos run means nothing. Each history here is written by hand on one
// recorder's timeline (call, return in arbitrary units).
func TestRegisterModel(t *testing.T) {
	type w struct {
		worker    int
		token     lease.Token
		value     string
		call, ret int64
		accepted  bool
		read      bool
		readValue string
		readToken lease.Token
	}
	for _, tc := range []struct {
		name string
		mode fence.Mode
		ops  []w
		want porcupine.CheckResult
	}{
		{"sequential", fence.AtLeast, []w{
			{worker: 0, token: 1, value: "a", call: 0, ret: 1, accepted: true},
			{worker: 0, token: 1, value: "b", call: 2, ret: 3, accepted: true},
			{worker: 1, token: 2, value: "c", call: 4, ret: 5, accepted: true},
			{worker: 0, token: 1, value: "late", call: 6, ret: 7, accepted: false},
			{worker: 1, read: true, call: 8, ret: 9, readValue: "c", readToken: 2},
		}, porcupine.Ok},
		{"stale write accepted", fence.AtLeast, []w{
			{worker: 1, token: 2, value: "c", call: 0, ret: 1, accepted: true},
			{worker: 0, token: 1, value: "late", call: 2, ret: 3, accepted: true},
		}, porcupine.Illegal},
		{"concurrent stale write may come first", fence.AtLeast, []w{
			{worker: 1, token: 2, value: "c", call: 0, ret: 5, accepted: true},
			{worker: 0, token: 1, value: "early", call: 1, ret: 2, accepted: true},
			{worker: 1, read: true, call: 6, ret: 7, readValue: "c", readToken: 2},
		}, porcupine.Ok},
		{"admissible write rejected", fence.AtLeast, []w{
			{worker: 0, token: 1, value: "a", call: 0, ret: 1, accepted: true},
			{worker: 1, token: 2, value: "c", call: 2, ret: 3, accepted: false},
		}, porcupine.Illegal},
		{"read of an overwritten value", fence.AtLeast, []w{
			{worker: 0, token: 1, value: "a", call: 0, ret: 1, accepted: true},
			{worker: 1, token: 2, value: "c", call: 2, ret: 3, accepted: true},
			{worker: 0, read: true, call: 4, ret: 5, readValue: "a", readToken: 1},
		}, porcupine.Illegal},
		{"strict: same token twice", fence.Strict, []w{
			{worker: 0, token: 1, value: "a", call: 0, ret: 1, accepted: true},
			{worker: 0, token: 1, value: "b", call: 2, ret: 3, accepted: true},
		}, porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := chaos.NewRecorder()
			for _, op := range tc.ops {
				if op.read {
					rec.Read(op.worker, "k", op.readValue, op.readToken, op.call, op.ret)
				} else {
					rec.Write(op.worker, "k", op.token, op.value, op.call, op.ret, op.accepted)
				}
			}
			hist, _, _ := rec.History()
			dir := t.TempDir()
			v, err := chaos.Check(chaos.RegisterModel(tc.mode), hist, nil, 10*time.Second, "register", false,
				func() (string, error) { return dir, nil })
			if err != nil {
				t.Fatal(err)
			}
			if v.Result != tc.want {
				t.Fatalf("got %s, want %s", v.Result, tc.want)
			}
			if tc.want != porcupine.Ok && v.Visualization == "" {
				t.Errorf("no visualisation written for an illegal history")
			}
		})
	}
}

func TestGrantModel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tokens [][3]int64 // token, call, return
		want   porcupine.CheckResult
	}{
		{"rising with gaps", [][3]int64{{1, 0, 1}, {3, 2, 3}, {7, 4, 5}}, porcupine.Ok},
		{"concurrent grants answered out of order", [][3]int64{{5, 0, 10}, {4, 1, 2}}, porcupine.Ok},
		{"a token repeated", [][3]int64{{1, 0, 1}, {1, 2, 3}}, porcupine.Illegal},
		{"a later grant with a lower token", [][3]int64{{2, 0, 1}, {1, 2, 3}}, porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := chaos.NewRecorder()
			for i, g := range tc.tokens {
				rec.Grant(i, "k", lease.Token(g[0]), g[1], g[2])
			}
			_, grants, _ := rec.History()
			if got := porcupine.CheckOperations(chaos.GrantModel(), grants); got != (tc.want == porcupine.Ok) {
				t.Fatalf("linearizable = %v, want %s", got, tc.want)
			}
		})
	}
}
