package etcdstore

import (
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/leasehq/lease"
)

// info is the value of a generation's info key: what Get and List report
// besides the token. The lease ID is in the holder key, alone, so that
// Renew and Release can compare it inside a transaction knowing only the
// key, token and ID.
type info struct {
	Owner   string `json:"owner"`
	TTLms   int64  `json:"ttl_ms"`
	EtcdTTL int64  `json:"etcd_ttl_s"`
}

func encodeInfo(owner string, ttl time.Duration, secs int64) string {
	b, _ := json.Marshal(info{Owner: owner, TTLms: ttl.Milliseconds(), EtcdTTL: secs}) // cannot fail
	return string(b)
}

func decodeInfo(kv *mvccpb.KeyValue) (info, error) {
	var in info
	if kv == nil {
		return in, fmt.Errorf("%w: etcdstore: generation without its info key", lease.ErrUnavailable)
	}
	if err := json.Unmarshal(kv.Value, &in); err != nil {
		return in, fmt.Errorf("%w: etcdstore: info key %q: %v", lease.ErrUnavailable, kv.Key, err)
	}
	return in, nil
}

// leaseFrom builds the lease.Lease (without ID) that holder and info keys
// describe, as seen at the local time now.
func leaseFrom(key string, h, i *mvccpb.KeyValue, now time.Time) (lease.Lease, error) {
	in, err := decodeInfo(i)
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

// tokenOf turns a create revision into a token, refusing revisions a token
// cannot carry.
func tokenOf(rev int64) (lease.Token, error) {
	if rev <= 0 || lease.Token(rev) > lease.MaxToken {
		return 0, fmt.Errorf("%w: etcdstore: revision %d is outside the token range [1, 2^53]", lease.ErrUnavailable, rev)
	}
	return lease.Token(rev), nil
}
