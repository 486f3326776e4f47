package leasehttp

import (
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// failureLog keeps the request log from saying the same backend failure
// once per request. A backend that has stopped (a store on a full disk
// fails every operation until it is restarted) would otherwise write one
// ERROR line, with its key, for every request that reaches it. The same
// failure is said again at most every failureLogEvery, to show it lasts.
type failureLog struct {
	last atomic.Pointer[loggedFailure]
}

type loggedFailure struct {
	msg string
	at  time.Time
}

// failureLogEvery is how often a failure that goes on is logged at ERROR.
const failureLogEvery = time.Minute

// repeated reports whether err says what the last failure logged at ERROR
// said, less than failureLogEvery before now; if not, err is the last.
func (f *failureLog) repeated(err error, now time.Time) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	if prev := f.last.Load(); prev != nil && prev.msg == msg && now.Sub(prev.at) < failureLogEvery {
		return true
	}
	f.last.Store(&loggedFailure{msg: msg, at: now})
	return false
}

// maxLogKey is how much of a key a log line shows.
const maxLogKey = 64

// logKey shortens key for the log to its first maxLogKey bytes, cut at a
// character boundary, with "…" after it.
func logKey(key string) string {
	if len(key) <= maxLogKey {
		return key
	}
	n := maxLogKey
	for n > 0 && !utf8.RuneStart(key[n]) {
		n--
	}
	return key[:n] + "…"
}
