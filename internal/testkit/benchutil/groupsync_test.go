package benchutil

import (
	"sync"
	"testing"
)

// TestGroupSyncShares: concurrent commits all return, share fdatasyncs,
// and never grow the log (an fdatasync that has to commit a new file size
// is a slower one, and a floor would not be a floor).
func TestGroupSyncShares(t *testing.T) {
	for _, record := range []int{64, 4096} {
		g, err := NewGroupSync(t.TempDir(), record)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		const clients, each = 32, 50
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for range clients {
			wg.Go(func() {
				for range each {
					if err := g.Commit(); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if n := g.Durable(); n != clients*each {
			t.Fatalf("record %d: %d records durable, want %d", record, n, clients*each)
		}
		if n := g.Syncs(); n >= clients*each/2 {
			t.Errorf("record %d: %d fdatasyncs for %d commits from %d clients: commits do not share them", record, n, clients*each, clients)
		}
		if size, err := g.Size(); err != nil || size != groupSyncRegion {
			t.Errorf("record %d: log size %v (%v), want %d: it grew", record, size, err, groupSyncRegion)
		}
	}
}

func TestGroupSyncRecordSize(t *testing.T) {
	for _, record := range []int{0, -1, 64<<10 + 1} {
		if g, err := NewGroupSync(t.TempDir(), record); err == nil {
			g.Close()
			t.Errorf("record size %d accepted", record)
		}
	}
}
