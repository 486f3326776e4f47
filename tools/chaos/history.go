package chaos

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehq/lease"
)

// OpKind is the kind of a recorded register operation.
type OpKind int

const (
	// OpWrite is a write to the register with a fencing token.
	OpWrite OpKind = iota
	// OpRead is a read of the register.
	OpRead
)

// RegisterInput is what a register operation asked for.
type RegisterInput struct {
	Kind  OpKind
	Key   string
	Token lease.Token // writes only
	Value string      // writes only
}

// RegisterOutput is what a register operation got back.
type RegisterOutput struct {
	Accepted bool        // writes: the guard took the write
	Value    string      // reads: the value returned
	Token    lease.Token // reads: the highest accepted token returned
}

// GrantInput is a successful Acquire on a key.
type GrantInput struct{ Key string }

// GrantOutput is the token the Acquire returned.
type GrantOutput struct{ Token lease.Token }

// Event is something the driver or a worker did that is not an operation of
// either model (a fault, a pause, a failed acquire): kept for the
// visualisation and the log.
type Event struct {
	Worker     int // -1 for the driver
	Start, End int64
	Tag        string
	Text       string
}

// Recorder is the one shared history of a run. Times are nanoseconds on the
// monotonic clock since the recorder was made. It is safe for concurrent use.
type Recorder struct {
	start time.Time

	mu       sync.Mutex
	register []porcupine.Operation
	grants   []porcupine.Operation
	events   []Event
	// acceptedCall is the latest invocation time of an accepted write.
	acceptedCall int64
}

// NewRecorder returns an empty Recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now returns the recorder's monotonic time in nanoseconds.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Write records a write by worker, invoked at call and answered at ret.
func (r *Recorder) Write(worker int, key string, token lease.Token, value string, call, ret int64, accepted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.register = append(r.register, porcupine.Operation{
		ClientId: worker, Call: call, Return: ret,
		Input:  RegisterInput{Kind: OpWrite, Key: key, Token: token, Value: value},
		Output: RegisterOutput{Accepted: accepted},
	})
	if accepted && call > r.acceptedCall {
		r.acceptedCall = call
	}
}

// Read records a read by worker that returned value and token.
func (r *Recorder) Read(worker int, key, value string, token lease.Token, call, ret int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.register = append(r.register, porcupine.Operation{
		ClientId: worker, Call: call, Return: ret,
		Input:  RegisterInput{Kind: OpRead, Key: key},
		Output: RegisterOutput{Value: value, Token: token},
	})
}

// Grant records a successful Acquire by worker.
func (r *Recorder) Grant(worker int, key string, token lease.Token, call, ret int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.grants = append(r.grants, porcupine.Operation{
		ClientId: worker, Call: call, Return: ret,
		Input: GrantInput{Key: key}, Output: GrantOutput{Token: token},
	})
}

// Event records an event from start to end.
func (r *Recorder) Event(worker int, start, end int64, tag, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, Event{Worker: worker, Start: start, End: end, Tag: tag, Text: fmt.Sprintf(format, args...)})
}

// History returns copies of the register and grant histories and the events.
func (r *Recorder) History() (register, grants []porcupine.Operation, events []Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.register...),
		append([]porcupine.Operation(nil), r.grants...),
		append([]Event(nil), r.events...)
}

// ProgressAfter reports whether a write invoked after t was accepted.
func (r *Recorder) ProgressAfter(t int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acceptedCall > t
}

// AcceptedAbove reports whether a write to key with a token above token
// has been accepted and its answer recorded.
func (r *Recorder) AcceptedAbove(key string, token lease.Token) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, op := range r.register {
		in, out := op.Input.(RegisterInput), op.Output.(RegisterOutput)
		if in.Kind == OpWrite && out.Accepted && in.Key == key && in.Token > token {
			return true
		}
	}
	return false
}

// GrantedAfter reports whether an Acquire of key invoked after t succeeded.
func (r *Recorder) GrantedAfter(key string, t int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, op := range r.grants {
		if op.Call > t && op.Input.(GrantInput).Key == key {
			return true
		}
	}
	return false
}

// FirstAcceptedAfter returns the earliest answer time of an accepted write
// invoked after t, and whether there is one: when the workers made progress
// after a fault that began at t.
func (r *Recorder) FirstAcceptedAfter(t int64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first int64
	found := false
	for _, op := range r.register {
		in, out := op.Input.(RegisterInput), op.Output.(RegisterOutput)
		if in.Kind == OpWrite && out.Accepted && op.Call > t && (!found || op.Return < first) {
			first, found = op.Return, true
		}
	}
	return first, found
}

// describeEvents formats events in start order for a failure message.
func describeEvents(events []Event, last int) string {
	sort.SliceStable(events, func(i, j int) bool { return events[i].Start < events[j].Start })
	if len(events) > last {
		events = events[len(events)-last:]
	}
	s := ""
	for _, e := range events {
		who := "driver"
		if e.Worker >= 0 {
			who = fmt.Sprintf("w%d", e.Worker)
		}
		s += fmt.Sprintf("  %9.3fms %-6s %s: %s\n", float64(e.Start)/1e6, who, e.Tag, e.Text)
	}
	return s
}
