package boltstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/leasehq/lease"
)

// DefaultLockTimeout is how long Open waits for the file lock held by another
// process before it gives up.
const DefaultLockTimeout = time.Second

// maxBatch bounds the operations one batch carries, so one log record stays
// small and the first caller in a batch is not kept waiting behind an
// unbounded queue.
const maxBatch = 1024

// Store is a durable lease.Backend in one bbolt file. It is safe for
// concurrent use by many goroutines of one process; the file itself is
// single-process. The zero value is not usable; call Open.
type Store struct {
	db    *bolt.DB
	path  string
	clock lease.Clock // nil: the real clock, read through base
	base  time.Time   // the real clock at Open, with its monotonic reading
	floor uint64      // every token issued is above it (AcceptLogLoss; see recover.go)
	// storeID is the store's random id, read by Open (StoreID).
	storeID string

	// ops carries write operations to the commit loop. It is unbuffered, so
	// an operation is either taken by the loop, which then always answers
	// it, or never sent (quit closed first).
	ops  chan *op
	quit chan struct{}
	// snapshots carries Backup's requests to the commit loop (backup.go).
	snapshots chan chan<- snapshot
	stopped   chan struct{}

	// The open write transaction (see wal.go) and the log. txMu serialises
	// the use of live: the commit loop holds it while it applies a batch
	// and while it checkpoints, readers while they read.
	txMu sync.Mutex
	live *txn
	wal  *wal

	// Batches that wrote something: applied to live, and made durable in
	// the log. Readers that must see only durable state wait on durCond
	// until durable reaches what applied was when they read.
	durMu            sync.Mutex
	durCond          *sync.Cond
	applied, durable uint64

	// Checkpoints; the commit loop's own.
	checkpointEvery  time.Duration
	checkpointAlways bool // tests only: a checkpoint after every batch that wrote
	lastCheckpoint   time.Time
	sweepAfter       []byte    // where the next sweep reads on from (sweep.go); nil: the first key
	quiet            quietMark // the mark in the log since the last checkpoint; zero: none (quiet.go)
	renewOrder       []int     // apply's, for a RenewBatch's renewals in key order (renewalOrder)

	syncHook func() // tests only: runs before each batch's log write

	// noLog (benchmarks only, see export_test.go) makes each batch durable
	// by committing the bbolt transaction, bbolt's own fsyncs, instead of
	// by a log record: the log's measured alternative.
	noLog bool

	commits     atomic.Uint64         // batches made durable (log records written, or noLog commits); tests read it
	checkpoints atomic.Uint64         // checkpoints committed since Open; tests read it
	failed      atomic.Pointer[error] // set by a failed log write or checkpoint: the store stops

	closeOnce sync.Once
	closeErr  error

	// wmu guards waiters and closed. The commit loop holds it while it
	// applies a batch, so queueing and hand-over are ordered with writes.
	wmu      sync.Mutex
	waiters  map[string]*queue
	timerGen uint64
	closed   bool

	watch watchState // watch.go
}

var (
	_ lease.Backend      = (*Store)(nil)
	_ lease.WaitAcquirer = (*Store)(nil)
	_ lease.BatchRenewer = (*Store)(nil)
	_ lease.Watcher      = (*Store)(nil)
	_ io.Closer          = (*Store)(nil)
)

// Option configures Open.
type Option func(*config) error

type config struct {
	clock            lease.Clock
	lockTimeout      time.Duration
	acceptLogLoss    func(*CorruptError) // nil: a damaged log is refused
	allowSharedDir   bool
	boltOptions      func(*bolt.Options) // tests only: e.g. a MaxSize to make commits fail
	checkpointAlways bool                // tests only
	checkpointEvery  time.Duration       // tests only; 0: DefaultCheckpointEvery
	noLog            bool                // benchmarks only (export_test.go)
	noQuietGrace     bool                // tests only: Open ignores the quiet mark (the negative control of quiet.go's tests)
	afterCommit      func() error        // tests only: runs after each commit of Open's recovery (recovery.afterCommit)
	hostClock        func() time.Time    // tests only; nil: time.Now, for the floor (floor.go)
}

// DefaultCheckpointEvery is how often, at most, the open transaction is
// committed to the bbolt file while writes arrive (see wal.go).
const DefaultCheckpointEvery = time.Second

// WithClock makes the store judge expiry on clk instead of the real clock.
// Expiry is stored as clk's absolute time, so a clock that restarts from an
// earlier time would extend stored leases; tests pass a fake clock.
func WithClock(clk lease.Clock) Option {
	return func(c *config) error {
		if clk == nil {
			return fmt.Errorf("%w: boltstore: nil clock", lease.ErrInvalid)
		}
		c.clock = clk
		return nil
	}
}

// WithLockTimeout sets how long Open waits for another process to let go of
// the file (default DefaultLockTimeout). It must be positive: waiting forever
// would turn a second `lease serve` into a hang.
func WithLockTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: boltstore: lock timeout %v is not positive", lease.ErrInvalid, d)
		}
		c.lockTimeout = d
		return nil
	}
}

// AcceptLogLoss makes Open serve a store whose log is damaged instead of
// refusing it with a *CorruptError (see ErrCorrupt). The records from the
// damage on are dropped, and with them what they did: the leases they
// granted or renewed are forgotten, and their holders, who still believe
// they hold them, are fenced off by what follows. Every key's next token,
// whether the store knows the key or not, is raised above the highest
// token the store knows plus the most tokens the dropped records can have
// issued (each grant takes some bytes of the log), for good: the floor is
// kept in the file. Once that is durable Open calls report with the loss,
// Floor set, before it returns; a damaged log that is never found calls
// nothing. Meant for one start after a refusal, by a person who has
// read the refusal and kept a copy of the files.
func AcceptLogLoss(report func(loss *CorruptError)) Option {
	return func(c *config) error {
		if report == nil {
			return fmt.Errorf("%w: boltstore: AcceptLogLoss needs a report function: the loss must be heard of", lease.ErrInvalid)
		}
		c.acceptLogLoss = report
		return nil
	}
}

// AllowSharedDir makes Open accept a directory that users other than this
// process's may write to (group- or world-writable and not sticky), or that
// belongs to another user, which it otherwise refuses: they could remove
// or replace the store's files, and with them every token it issued.
func AllowSharedDir() Option {
	return func(c *config) error {
		c.allowSharedDir = true
		return nil
	}
}

// Open opens the store in the bbolt file at path, creating it (mode 0600) if
// it does not exist; its directory must exist, and be writable by this
// process's user alone (see AllowSharedDir). The file, the log beside
// it (path with "-wal" after it) and the copy of its lead (path with
// "-lead" after it, lead.go) must each be a regular file of this process's
// user, with one name, or be missing: Open refuses a symbolic link,
// another user's file or a hard-linked one, before it writes to it, and
// sets the file and its log to mode 0600 whatever their mode was, as they
// hold every lease's secret ID. It fails fast, with an error matching
// lease.ErrUnavailable that names path, if another process holds the file, if
// the file is not a consistent bbolt database, or if it was written by a newer
// schema, and with one matching ErrCorrupt too if the log is damaged (see
// AcceptLogLoss). An Open that fails removes the files it created. Close
// releases the file.
func Open(path string, opts ...Option) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: boltstore: empty path", lease.ErrInvalid)
	}
	cfg := config{lockTimeout: DefaultLockTimeout}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: boltstore: nil option", lease.ErrInvalid)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	s, err := open(path, cfg, nil)
	var bad *CorruptError
	if errors.As(err, &bad) && bad.aside && cfg.acceptLogLoss != nil {
		// bbolt cannot open the file: a new one takes its place, above
		// every token the host clock allows (floor.go) plus the lead the
		// damaged file held.
		bad.salvaged = salvage(path)
		if err := moveAside(path); err != nil {
			return nil, err
		}
		return open(path, cfg, bad)
	}
	return s, err
}

// open is Open once its options are read; lost is a damaged bbolt file
// already moved aside (AcceptLogLoss), or nil.
func open(path string, cfg config, lost *CorruptError) (s *Store, err error) {
	if err := checkDir(path, cfg.allowSharedDir); err != nil {
		return nil, err
	}
	// Refused before anything is opened: opening a FIFO or a device may
	// block, or act.
	for _, p := range []string{path, walPath(path), leadPath(path)} {
		fi, err := os.Lstat(p)
		switch {
		case err == nil:
			err = checkOwnInfo(p, fi)
		case errors.Is(err, fs.ErrNotExist):
			err = nil
		default:
			err = unavailablef(err, "boltstore: cannot open %s", p)
		}
		if err != nil {
			return nil, err
		}
	}
	// lease.db is looked at before bbolt maps it (dbfile.go), and must be
	// there if its log is: bbolt would start a new file, and the tokens
	// the old one issued over again.
	dbSize, err := checkDBFile(path)
	if err != nil {
		return nil, err
	}
	leadCopy, copyFound, copyOK, err := readLeadCopy(path)
	if err != nil {
		return nil, err
	}
	_, walErr := os.Lstat(walPath(path))
	if dbSize == 0 && lost == nil && (walErr == nil || copyFound) {
		what := "is missing"
		if _, err := os.Lstat(path); err == nil {
			what = "is empty"
		}
		reason := what + ", but its log is there: the file held every token issued before the log's last checkpoint (put it back, or restore a backup into a new data directory)"
		if walErr != nil {
			reason = what + ", and so is its log, but " + leadPath(path) + " is there: a store issued tokens here, and a new one would start at token 1 again (put both files back, or restore a backup into a new data directory)"
		}
		lost = &CorruptError{File: path, Log: walPath(path), Offset: -1, Reason: reason}
		if cfg.acceptLogLoss == nil {
			return nil, lost
		}
	}
	var (
		bf      boltFile
		db      *bolt.DB
		w       *wal
		created []string
	)
	defer func() {
		if err == nil {
			bf.release()
			return
		}
		// A failed start leaves nothing half made: a bbolt file cut short
		// by a full disk would not open again. What it created goes, while
		// it holds the lock.
		for _, p := range created {
			_ = os.Remove(p)
		}
		if len(created) > 0 {
			_ = syncDir(filepath.Dir(path))
		}
		if w != nil {
			_ = w.close()
		}
		if db != nil {
			_ = db.Close()
		} else if bf.f != nil {
			// bbolt panicked with the file open and locked: close it.
			// (If it had mapped the file, the mapping keeps the lock
			// until the process ends: checkDBFile refuses first what is
			// known to make it panic there, a freelist it cannot read.)
			_ = bf.f.Close()
		}
		bf.release()
	}()
	bo := &bolt.Options{Timeout: cfg.lockTimeout, OpenFile: bf.open}
	if cfg.boltOptions != nil {
		cfg.boltOptions(bo)
	}
	db, err = openDB(path, bo)
	if bf.created {
		created = append(created, path)
	}
	if err != nil {
		return nil, err
	}
	if err := bf.stillAt(path); err != nil {
		return nil, err
	}
	version, err := checkFile(db, path)
	if err != nil {
		return nil, err
	}
	if err := makePrivate(bf.f, path); err != nil {
		return nil, err
	}
	hostClock := time.Now
	if cfg.hostClock != nil {
		hostClock = cfg.hostClock
	}
	expiryNow := time.Now
	if cfg.clock != nil {
		expiryNow = cfg.clock.Now
	}
	w, floor, lead, logCreated, err := recoverLog(db, recovery{
		path: path, version: version, fresh: dbSize == 0, lost: lost, leadCopy: leadCopy,
		accept: cfg.acceptLogLoss, now: hostClock, expiryNow: expiryNow, noQuietGrace: cfg.noQuietGrace,
		afterCommit: cfg.afterCommit,
	})
	if logCreated {
		created = append(created, walPath(path))
	}
	if err != nil {
		return nil, err
	}
	storeID, err := readStoreID(db, path)
	if err != nil {
		return nil, err
	}
	// The lead's copy (lead.go), before the store answers anything: the
	// tokens it issues rest on this lead.
	if !copyOK || leadCopy != lead {
		if err := writeLeadCopy(path, lead); err != nil {
			return nil, err
		}
		if !copyFound {
			created = append(created, leadPath(path))
		}
	}
	s = &Store{
		db:        db,
		path:      path,
		floor:     floor,
		storeID:   storeID,
		clock:     cfg.clock,
		base:      time.Now(),
		snapshots: make(chan chan<- snapshot),
		ops:       make(chan *op),
		quit:      make(chan struct{}),
		stopped:   make(chan struct{}),
		waiters:   make(map[string]*queue),
		wal:       w,

		checkpointEvery:  cmp.Or(cfg.checkpointEvery, DefaultCheckpointEvery),
		checkpointAlways: cfg.checkpointAlways,
		lastCheckpoint:   time.Now(),
		noLog:            cfg.noLog,
	}
	s.durCond = sync.NewCond(&s.durMu)
	s.watch.init(s)
	if s.live, err = s.begin(); err != nil {
		return nil, err
	}
	go s.run()
	return s, nil
}

// openDB opens the bbolt file, turning bbolt's errors into ones a person
// starting a server can act on. bbolt may panic on some malformed files
// rather than return an error; that is reported as corruption too.
func openDB(path string, bo *bolt.Options) (db *bolt.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, corruptFile(path, r)
		}
	}()
	// NoSync stays false: every commit is fsynced before its callers are
	// answered (I1 across crashes).
	db, err = bolt.Open(path, 0o600, bo)
	var own *storeError
	switch {
	case err == nil:
		return db, nil
	case errors.As(err, &own):
		return nil, err // boltFile.open's: it says what is wrong
	case errors.Is(err, berrors.ErrTimeout):
		return nil, &storeError{
			msg:  fmt.Sprintf("boltstore: %s is locked by another process (is another lease serve running?)", path),
			errs: []error{lease.ErrUnavailable, err},
		}
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrInvalidMapping):
		return nil, corruptFile(path, err)
	default:
		// Other errors: a directory, a missing parent, permissions, or a
		// file too short to be a database; bbolt's text says which.
		return nil, unavailablef(err, "boltstore: cannot open %s", path)
	}
}

// corruptFile is the refusal of a bbolt file that bbolt cannot read
// (cause: its error, or its panic): AcceptLogLoss moves it aside.
func corruptFile(path string, cause any) *CorruptError {
	return dbDamaged(path, "%s", strings.ReplaceAll(fmt.Sprintf("is corrupt or not a bbolt database (%v)", cause), "\n", " "))
}

// checkFile creates the schema in a new file, refuses a file of another or
// newer schema, and walks every page once so that corruption is reported now,
// as an error, instead of later as a panic inside a request. It returns the
// file's schema version: schemaVersion, or 2 for a file whose log is of
// that version, which recoverLog reads and upgrades.
func checkFile(db *bolt.DB, path string) (version uint64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = corruptFile(path, r)
		}
	}()
	var checkErrs []error
	if err := db.View(func(tx *bolt.Tx) error {
		for e := range tx.Check() {
			checkErrs = append(checkErrs, e)
		}
		return nil
	}); err != nil {
		return 0, unavailablef(err, "boltstore: cannot read %s", path)
	}
	if len(checkErrs) > 0 {
		// One line, as every refusal: the first few of bbolt's findings.
		var msgs []string
		for _, e := range checkErrs[:min(len(checkErrs), 3)] {
			msgs = append(msgs, strings.ReplaceAll(e.Error(), "\n", " "))
		}
		if len(checkErrs) > 3 {
			msgs = append(msgs, fmt.Sprintf("and %d more", len(checkErrs)-3))
		}
		return 0, dbDamaged(path, "is corrupt: bbolt's consistency check failed (%s)", strings.Join(msgs, "; "))
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			empty := true
			_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
			if !empty && (tx.Bucket(bucketLeases) != nil || tx.Bucket(bucketTokens) != nil) {
				// A lease store's buckets without its meta: a bit flipped
				// in the name of the root page's meta bucket.
				return strayBuckets(tx, path, "has no meta bucket")
			}
			if !empty {
				return unavailablef(nil, "boltstore: %s is a bbolt database but not a lease store (no %q bucket)", path, bucketMeta)
			}
			var err error
			if meta, err = tx.CreateBucket(bucketMeta); err != nil {
				return unavailablef(err, "boltstore: cannot initialise %s", path)
			}
			if err := putVersion(meta, schemaVersion); err != nil {
				return unavailablef(err, "boltstore: cannot initialise %s", path)
			}
		}
		v, err := readVersion(meta, path)
		if err != nil {
			return err
		}
		if v == 1 { // schema 1 had no log: it is schema 3 without one, which recoverLog upgrades
			if err := putVersion(meta, 3); err != nil {
				return unavailablef(err, "boltstore: cannot upgrade %s to schema version %d", path, 3)
			}
			v = 3
		}
		switch {
		case v > schemaVersion:
			return unavailablef(nil, "boltstore: %s has schema version %d, newer than version %d that this build reads; upgrade lease", path, v, schemaVersion)
		case v < 2:
			return unavailablef(nil, "boltstore: %s has unknown schema version %d", path, v)
		}
		version = v
		names := [][]byte{bucketLeases}
		if v < 4 {
			names = append(names, bucketTokens) // folded by upgrade
		}
		// Nothing but the store's buckets: a bit flipped in the leases
		// bucket's name would leave its leases under another name, and a
		// new, empty leases bucket would forget them (and what they hold).
		stray := false
		_ = tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			known := bytes.Equal(name, bucketMeta)
			for _, n := range names {
				known = known || bytes.Equal(name, n)
			}
			stray = stray || !known
			return nil
		})
		if stray {
			return strayBuckets(tx, path, "holds a bucket that is not the store's")
		}
		for _, name := range names {
			if _, err := tx.CreateBucketIfNotExists(name); errors.Is(err, berrors.ErrIncompatibleValue) {
				// A bit flipped in the flags of the bucket's element.
				return dbDamaged(path, "holds %q as a value, not as the bucket of the store's", name)
			} else if err != nil {
				return unavailablef(err, "boltstore: cannot initialise bucket %q in %s", name, path)
			}
		}
		return nil
	})
	return version, err
}

// strayBuckets is the refusal of a lease store's file whose top-level
// buckets are not the store's: what, and the buckets' names.
func strayBuckets(tx *bolt.Tx, path, what string) error {
	var names []string
	_ = tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		names = append(names, strconv.Quote(string(name)))
		return nil
	})
	return dbDamaged(path, "is corrupt: it %s (its buckets: %s; a lease store has %q and %q)", what, strings.Join(names, ", "), bucketMeta, bucketLeases)
}

// moveAside renames the damaged bbolt file at path out of the way, for
// AcceptLogLoss: kept for whoever looks into the damage, and replaced by a
// new file.
func moveAside(path string) error {
	// Never over an earlier damaged copy (one moved aside in the same
	// second): it is what the operator keeps to find out what happened.
	to := fmt.Sprintf("%s.damaged-%d", path, time.Now().Unix())
	for i, base := 2, to; ; i++ {
		if _, err := os.Lstat(to); errors.Is(err, fs.ErrNotExist) {
			break
		}
		to = fmt.Sprintf("%s-%d", base, i)
	}
	if err := os.Rename(path, to); err != nil {
		return unavailablef(err, "boltstore: cannot move the damaged %s aside", path)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return unavailablef(err, "boltstore: cannot move the damaged %s aside", path)
	}
	return nil
}

// boltFile opens the bbolt file for bbolt (bolt.Options.OpenFile) as
// openOwnFile does, and keeps what Open needs of it.
type boltFile struct {
	f       *os.File
	created bool   // by this Open
	unlock  func() // holds the file's lock past a failed bolt.Open (see holdLock)
}

func (bf *boltFile) open(path string, _ int, _ os.FileMode) (*os.File, error) {
	f, created, err := openOwnFile(path)
	if err != nil {
		return nil, err
	}
	bf.f, bf.created = f, created
	if created {
		bf.unlock = holdLock(f)
	}
	return f, nil
}

func (bf *boltFile) release() {
	if bf.unlock != nil {
		bf.unlock()
		bf.unlock = nil
	}
}

// stillAt checks, once bbolt holds the file's lock, that the file is still
// the one at path: another Open that created it and then failed removes it
// (see Open), and a file without a name would keep nothing.
func (bf *boltFile) stillAt(path string) error {
	open, err := bf.f.Stat()
	if err != nil {
		return unavailablef(err, "boltstore: cannot stat %s", path)
	}
	now, err := os.Lstat(path)
	if err != nil || !os.SameFile(open, now) {
		return unavailablef(err, "boltstore: %s was removed or replaced while it was being opened (did another lease serve fail to start?); try again", path)
	}
	return nil
}

// now reads the store's clock. The real clock is read as the wall time at
// Open plus the monotonic time since, so that within a process a step of the
// wall clock neither shortens nor lengthens a lease; the result carries no
// monotonic reading, as it is stored and compared with stored times.
func (s *Store) now() time.Time {
	if s.clock == nil {
		return s.base.Add(time.Since(s.base)).Round(0)
	}
	return s.clock.Now().Round(0)
}

func (s *Store) afterFunc(d time.Duration, f func()) lease.Timer {
	if s.clock == nil {
		return time.AfterFunc(d, f)
	}
	return s.clock.AfterFunc(d, f)
}

// Path returns the file the store was opened on.
func (s *Store) Path() string { return s.path }

// StoreID names the leases the Store serves: "bolt:" and a random id of
// 32 hex digits that the Open creating the store writes into the file (an
// Open of a store made before it was kept writes one), durably before the
// store answers anything, and every later Open reads. Another store has
// its own. lease serve sends it to clients (leasehttp WithStoreID), so
// that a client listing several servers finds one serving another store.
// The id is the store's, not the file's: Backup copies it and Restore
// keeps it, so a store restored to replace one (in a new data directory)
// is the same to clients that saw it before; a restored copy must not be
// served beside the store it was taken from. A store whose id AcceptLogLoss
// found damaged, or whose bbolt file it moved aside, gets a new id, and
// clients that saw the old one refuse its answers until they are
// restarted. The id is printable ASCII, 37 bytes.
func (s *Store) StoreID() string { return "bolt:" + s.storeID }

// Close stops the commit loop after its current commit, checkpoints the
// log into the bbolt file, fails pending waiters with an error matching
// lease.ErrUnavailable, cuts watchers off the same way, and closes the
// file. Operations after Close fail the same way. If the store has
// failed (a log write, or a checkpoint, Close's own included, failed),
// Close returns that error: the bbolt file then lacks writes that only the
// log holds, and the next Open recovers them. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.quit)
		<-s.stopped
		s.watch.close(errClosed)
		s.wmu.Lock()
		s.closed = true
		s.failWaiters(errClosed)
		s.wmu.Unlock()
		errs := []error{s.failure()}
		if err := s.wal.close(); err != nil {
			errs = append(errs, unavailablef(err, "boltstore: closing the log of %s", s.path))
		}
		if err := s.db.Close(); err != nil {
			errs = append(errs, unavailablef(err, "boltstore: closing %s", s.path))
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

var errClosed = unavailablef(nil, "boltstore: store is closed")

// failure returns the error of a failed commit, after which every operation
// fails (see finish), or nil.
func (s *Store) failure() error {
	if err := s.failed.Load(); err != nil {
		return *err
	}
	return nil
}

// view runs fn on the store's state once every batch it may see is
// durable: it never shows state that a crash could undo.
func (s *Store) view(ctx context.Context, fn func(leases *bolt.Bucket) error) error {
	pending, err := s.read(ctx, fn)
	if werr := s.waitDurable(ctx, pending); werr != nil {
		return werr
	}
	return err
}

// read runs fn on the leases bucket of the open transaction, which holds
// every applied batch. fn's answer, found or not, may rest on a batch whose
// log record is not yet durable: read returns how many batches it saw if
// some of them are not, else 0, and an answer of fn's is given out only
// once waitDurable of that returns.
func (s *Store) read(ctx context.Context, fn func(leases *bolt.Bucket) error) (pending uint64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := s.failure(); err != nil {
		return 0, err
	}
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if s.live == nil {
		if err := s.failure(); err != nil {
			return 0, err
		}
		return 0, errClosed
	}
	err = fn(s.live.leases)
	s.durMu.Lock()
	if s.durable < s.applied {
		pending = s.applied
	}
	s.durMu.Unlock()
	return pending, err
}

// waitDurable returns once the first pending batches are durable, or with
// the store's failure or ctx's error. With pending 0 (nothing was in
// flight) it returns at once.
func (s *Store) waitDurable(ctx context.Context, pending uint64) error {
	if pending == 0 {
		return nil
	}
	s.durMu.Lock()
	defer s.durMu.Unlock()
	if s.durable >= pending {
		return nil
	}
	// A sync may stall (a slow or failing disk): let ctx end the wait.
	stop := context.AfterFunc(ctx, func() {
		s.durMu.Lock()
		s.durCond.Broadcast()
		s.durMu.Unlock()
	})
	defer stop()
	for s.durable < pending {
		if err := s.failure(); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		s.durCond.Wait()
	}
	return nil
}
