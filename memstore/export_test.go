package memstore

// Waiting returns how many AcquireWait calls wait in s's line for key: a
// test that must know a waiter has reached the line waits on it instead of
// sleeping.
func Waiting(s *Store, key string) int {
	e := s.locked(s.hash(key), key, false)
	if e == nil {
		return 0
	}
	defer e.mu.Unlock()
	return e.waiting()
}

// BackendFloor is backendFloor, for the Compare benchmarks.
type BackendFloor = backendFloor

// NewBackendFloor is newBackendFloor.
func NewBackendFloor(keys []string) *BackendFloor { return newBackendFloor(keys) }
