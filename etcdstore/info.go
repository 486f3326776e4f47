package etcdstore

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
)

// info is what an entry's value tells besides the lease ID.
type info struct {
	Owner   string `json:"owner"`
	TTLms   int64  `json:"ttl_ms"`
	EtcdTTL int64  `json:"etcd_ttl_s"`
	// ExpUS is the writer's estimate of the expiry, in µs since the epoch
	// on its clock, as the call that wrote the key returned it; watches
	// report it. Zero in values written by earlier versions.
	ExpUS int64 `json:"exp_us,omitempty"`
}

// holderValue is an entry's value: the lease ID in hex, NUL, the info
// as JSON. Leading with the ID lets a transaction check it with two
// byte-wise comparisons (idCmps) knowing only the ID, as Renew and Release
// must (the HTTP API sends only key, token and ID).
//
// It is built by hand rather than with json.Marshal, whose reflection cost
// about 2% of a lone client's acquire+release (measured interleaved with
// concurrency.Mutex); decodeInfo reads it with json.Unmarshal.
func holderValue(id lease.ID, owner string, ttl time.Duration, secs int64, exp time.Time) string {
	b := make([]byte, 0, 2*len(id)+len(owner)+64)
	b = hex.AppendEncode(b, id[:])
	b = append(b, 0)
	b = append(b, `{"owner":`...)
	b = appendJSONString(b, owner)
	b = append(b, `,"ttl_ms":`...)
	b = strconv.AppendInt(b, ttl.Milliseconds(), 10)
	b = append(b, `,"etcd_ttl_s":`...)
	b = strconv.AppendInt(b, secs, 10)
	b = append(b, `,"exp_us":`...)
	b = strconv.AppendInt(b, exp.UnixMicro(), 10)
	return string(append(b, '}'))
}

// appendJSONString appends s as a JSON string: between quotes as it is when
// every byte is printable ASCII other than '"' and '\\' (nothing to
// escape), else as json.Marshal writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			js, _ := json.Marshal(s) // a string cannot fail
			return append(b, js...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// idCmps hold when the value of entry h starts with id and NUL:
// id+"\x00" < value < id+"\x01", byte-wise.
func idCmps(h string, id lease.ID) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.Value(h), ">", id.Reveal()),
		clientv3.Compare(clientv3.Value(h), "<", id.Reveal()+"\x01"),
	}
}

func decodeInfo(kv *mvccpb.KeyValue) (info, error) {
	var in info
	_, js, ok := bytes.Cut(kv.Value, []byte{0})
	if !ok {
		return in, fmt.Errorf("%w: etcdstore: entry %q has no info", lease.ErrUnavailable, kv.Key)
	}
	if err := json.Unmarshal(js, &in); err != nil {
		return in, fmt.Errorf("%w: etcdstore: entry %q: %v", lease.ErrUnavailable, kv.Key, err)
	}
	return in, nil
}

// leaseFrom builds the lease.Lease (without ID) that entry h
// describes, as seen at the local time now.
func leaseFrom(key string, h *mvccpb.KeyValue, now time.Time) (lease.Lease, error) {
	in, err := decodeInfo(h)
	if err != nil {
		return lease.Lease{}, err
	}
	tok, err := tokenOf(h.CreateRevision)
	if err != nil {
		return lease.Lease{}, err
	}
	return lease.Lease{
		Key:   key,
		Owner: in.Owner,
		Token: tok,
		TTL:   time.Duration(in.TTLms) * time.Millisecond,
		// Not knowing when the holder last refreshed its etcd lease, the
		// latest it can expire without another refresh.
		Expires: now.Add(time.Duration(in.EtcdTTL) * time.Second),
	}, nil
}

// estimate is el's expiry estimate to the microsecond a holder value
// keeps: what a call that writes the value returns as Lease.Expires, so
// that a watch reports the same.
func (s *Store) estimate(el *etcdLease) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.UnixMicro(el.expires().UnixMicro())
}

// tokenOf turns a create revision into a token, refusing revisions a token
// cannot carry.
func tokenOf(rev int64) (lease.Token, error) {
	if rev <= 0 || lease.Token(rev) > lease.MaxToken {
		return 0, fmt.Errorf("%w: etcdstore: revision %d is outside the token range [1, 2^53]", lease.ErrUnavailable, rev)
	}
	return lease.Token(rev), nil
}
