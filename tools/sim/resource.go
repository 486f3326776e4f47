package sim

import (
	"fmt"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
)

// A register is one guarded resource, written with the tokens of the leases
// on one key: the lock's key, the election's, or one semaphore slot's.
type register struct {
	name string
	// guarded, or a plain cell for the Unguarded negative control
	res   *fence.Resource[string]
	plain struct {
		value string
		token lease.Token
	}
	// the oracle, kept beside it
	highest lease.Token // highest token the register accepted
	newest  string      // value of the newest accepted write
}

func (s *Sim) registerLocked(name string) *register {
	r := s.registers[name]
	if r == nil {
		r = &register{name: name, res: fence.NewResource(name, "initial", fence.AtLeast), newest: "initial"}
		r.plain.value = "initial"
		s.registers[name] = r
	}
	return r
}

// write runs at the resource. The property checked (GuardOrder; P1, P2 and
// E2) is that the accepted writes' tokens never go down: once a write with
// token t is accepted, no write with a token below t is. Tokens name
// generations (a lock's holder, a leader's term, a slot's holder), so two
// generations' accepted writes never interleave: all of the older one's
// come before any of the newer one's.
func (s *Sim) write(name string, token lease.Token, value string) error {
	s.mu.Lock()
	s.stats.Writes++
	r := s.registerLocked(name)
	s.mu.Unlock()
	if !s.cfg.Unguarded {
		if err := r.res.Write(token, value); err != nil {
			s.mu.Lock()
			s.stats.Rejected++
			s.mu.Unlock()
			return err
		}
	} else {
		s.mu.Lock()
		r.plain.value, r.plain.token = value, token
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Accepted++
	if token < r.highest {
		s.violateLocked(GuardOrder, "the resource %s accepted token %d after token %d", name, token, r.highest)
		return nil
	}
	r.highest, r.newest = token, value
	return nil
}

// read runs at the resource: what it returns must be the newest accepted
// generation's value (ReadNewest, P3).
func (s *Sim) read(name string) error {
	s.mu.Lock()
	r := s.registerLocked(name)
	s.mu.Unlock()
	var value string
	if s.cfg.Unguarded {
		s.mu.Lock()
		value = r.plain.value
		s.mu.Unlock()
	} else {
		value, _ = r.res.Read()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Reads++
	if value != r.newest {
		s.violateLocked(ReadNewest, "a read of %s returned %q, but the newest accepted write is %q", name, value, r.newest)
	}
	return nil
}

// writeAs sends a write of token to register name from c, as its worker,
// and sometimes a read after it.
func (s *Sim) writeAs(c *simClient, name, who string, token lease.Token) {
	value := fmt.Sprintf("%s@t%d", who, token)
	_, _ = s.send(c.ctx, c, workerLane, toResource, fmt.Sprintf("%s write %stoken %d", who, keyDesc(name), token),
		func() (any, error) { return nil, s.write(name, token, value) })
	if c.rng.IntN(3) == 0 {
		_, _ = s.send(c.ctx, c, workerLane, toResource, who+" read"+keySuffix(name), func() (any, error) { return nil, s.read(name) })
	}
}

func keySuffix(name string) string {
	if name == lockKey {
		return ""
	}
	return " " + name
}
