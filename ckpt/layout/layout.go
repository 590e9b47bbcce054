// Package layout is the on-disk format of gompi checkpoints (docs/ckpt.md):
// a directory per epoch under a prefix, one file per rank, and a manifest
// with every file's size and checksum whose atomic rename commits the
// epoch. It imports nothing of the rank runtime, so gompiexec lists,
// verifies, removes and chooses epochs with it.
package layout

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Version is the manifest format version.
const Version = 1

// ManifestName is the file whose presence commits an epoch.
const ManifestName = "MANIFEST"

const (
	epochPrefix = "epoch."
	rankPrefix  = "rank."
	tmpSuffix   = ".tmp"
)

// crcTable is CRC-32C (Castagnoli): hardware-accelerated, so checksumming
// costs little next to the write itself. Made on first use, not at package
// init, which every gompiexec start would pay (0.2-0.6 ms).
var crcTable = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// Errors callers test with errors.Is.
var (
	ErrNoEpoch     = errors.New("no committed checkpoint epoch")
	ErrCorrupt     = errors.New("checkpoint file corrupt")
	ErrMissing     = errors.New("checkpoint file missing")
	ErrBadPrefix   = errors.New("not a checkpoint prefix")
	ErrUncommitted = errors.New("epoch not committed")

	errNoFallocate = errors.New("file system cannot preallocate")
)

// File describes one rank's file in a manifest.
type File struct {
	Rank   int    `json:"rank"`
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	CRC32C string `json:"crc32c"` // 8 hex digits; "" in a cache manifest until the epoch's flush computed it
}

// Manifest describes a committed epoch.
type Manifest struct {
	Version int       `json:"version"`
	Epoch   int       `json:"epoch"`
	Ranks   int       `json:"ranks"`
	Time    time.Time `json:"time"`
	// Step is the application's own counter at this epoch (informational).
	Step  int64  `json:"step,omitempty"`
	Files []File `json:"files"` // one per rank, in rank order
}

// Size is the total of the files' sizes.
func (m *Manifest) Size() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// Checksummed reports whether every file's entry has its checksum (a
// cache manifest does not until the epoch's flush computed them).
func (m *Manifest) Checksummed() bool {
	for _, f := range m.Files {
		if f.CRC32C == "" {
			return false
		}
	}
	return true
}

// EpochDir is the directory of epoch e under prefix.
func EpochDir(prefix string, e int) string {
	return filepath.Join(prefix, fmt.Sprintf("%s%06d", epochPrefix, e))
}

// RankName is rank r's file name inside an epoch directory.
func RankName(r int) string { return fmt.Sprintf("%s%05d", rankPrefix, r) }

// RankPath is rank r's file of epoch e under prefix.
func RankPath(prefix string, e, r int) string { return filepath.Join(EpochDir(prefix, e), RankName(r)) }

// ParseEpochDir returns the epoch number of a directory name, ok false for
// names that are not epochs.
func ParseEpochDir(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, epochPrefix)
	if !ok || len(s) == 0 {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || filepath.Base(EpochDir("", n)) != name {
		// Only the name EpochDir gives: every reader and remover finds
		// an epoch by that name ("epoch.7" was listed as epoch 7, whose
		// removal then removed nothing).
		return 0, false
	}
	return n, true
}

// ParseManifest decodes and validates a manifest; src names it in errors.
func ParseManifest(data []byte, src string) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", src, ErrCorrupt, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: %w: data after the manifest", src, ErrCorrupt)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", src, ErrCorrupt, err)
	}
	return &m, nil
}

func (m *Manifest) validate() error {
	switch {
	case m.Version != Version:
		return fmt.Errorf("manifest version %d, want %d", m.Version, Version)
	case m.Epoch < 0:
		return fmt.Errorf("epoch %d", m.Epoch)
	case m.Ranks < 1 || m.Ranks > 1<<24:
		return fmt.Errorf("ranks %d", m.Ranks)
	case len(m.Files) != m.Ranks:
		return fmt.Errorf("%d files for %d ranks", len(m.Files), m.Ranks)
	}
	for i, f := range m.Files {
		switch {
		case f.Rank != i:
			return fmt.Errorf("file %d is for rank %d", i, f.Rank)
		case f.Name != RankName(i):
			return fmt.Errorf("rank %d: file name %q, want %q", i, f.Name, RankName(i))
		case f.Size < 0:
			return fmt.Errorf("rank %d: size %d", i, f.Size)
		}
		if f.CRC32C == "" {
			continue // not computed yet (a cache epoch before its flush)
		}
		if _, err := parseCRC(f.CRC32C); err != nil {
			return fmt.Errorf("rank %d: %v", i, err)
		}
	}
	return nil
}

func parseCRC(s string) (uint32, error) {
	if len(s) != 8 {
		return 0, fmt.Errorf("checksum %q: want 8 hex digits", s)
	}
	v, err := strconv.ParseUint(s, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("checksum %q: want 8 hex digits", s)
	}
	return uint32(v), nil
}

// FormatCRC is the manifest spelling of a CRC-32C.
func FormatCRC(c uint32) string { return fmt.Sprintf("%08x", c) }

// ReadManifest reads epoch e's manifest; ErrUncommitted when it has none.
func ReadManifest(prefix string, e int) (*Manifest, error) {
	p := filepath.Join(EpochDir(prefix, e), ManifestName)
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", EpochDir(prefix, e), ErrUncommitted)
	}
	if err != nil {
		return nil, err
	}
	m, err := ParseManifest(data, p)
	if err != nil {
		return nil, err
	}
	if m.Epoch != e {
		return nil, fmt.Errorf("%s: %w: manifest names epoch %d", p, ErrCorrupt, m.Epoch)
	}
	return m, nil
}

// Writer writes one rank's file: into a temporary name, checksummed as it
// goes; Close syncs it and renames it into place.
type Writer struct {
	f    *os.File
	path string
	rank int
	n    int64
	crc  uint32
	err  error
	// noCRC: the checksum is left to the flush (NoChecksum).
	noCRC bool
	// reuse: the file is a spare being overwritten (Reuse); Close cuts
	// it to the bytes written.
	reuse bool
	// always: Skip reserves its range's storage even with room to spare
	// (ReserveAlways).
	always bool
}

// ReserveAlways makes Skip reserve the skipped range's storage whatever
// the file system's free space (after a snapshot writer ran out of it).
func (w *Writer) ReserveAlways() { w.always = true }

// Create starts rank r's file of epoch e under prefix, creating the epoch
// directory.
func Create(prefix string, e, r int) (*Writer, error) {
	dir := EpochDir(prefix, e)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, RankName(r))
	f, err := os.OpenFile(path+tmpSuffix, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return &Writer{f: f, path: path, rank: r}, nil
}

// writeChunk: large writes are checksummed and written a chunk at a time,
// so the write finds the bytes the checksum just read still in the CPU's
// cache (one pass over memory instead of two).
const writeChunk = 1 << 20

// NoChecksum makes w skip the checksum: Close's entry has an empty CRC32C,
// to be filled in by the flush that reads the file back (docs/ckpt.md,
// "Levels"). Writes still go a chunk at a time: measured on 4 ranks and
// 2 cores, one 256 MiB write blocked the application longer than 1 MiB
// ones (medians 0.89 s and 0.60 s in 6 interleaved pairs under load).
func (w *Writer) NoChecksum() { w.noCRC = true }

func (w *Writer) Write(p []byte) (int, error) {
	total := 0
	for len(p) > 0 && w.err == nil {
		c := p[:min(len(p), writeChunk)]
		if !w.noCRC {
			w.crc = crc32.Update(w.crc, crcTable(), c)
		}
		n, err := w.f.Write(c)
		w.n += int64(n)
		total += n
		p = p[n:]
		if err != nil && w.err == nil {
			w.err = fmt.Errorf("%s: %w", w.path, err)
		}
	}
	return total, w.err
}

// Skip leaves the next n bytes of the file to be written by someone else
// (a snapshot writer, with pwrite at the returned offset), with their
// storage allocated, and moves past them. It needs NoChecksum: w cannot checksum bytes it does not write.
func (w *Writer) Skip(n int64) (int64, error) {
	if w.err != nil {
		return 0, w.err
	}
	if !w.noCRC {
		return 0, fmt.Errorf("%s: Skip without NoChecksum", w.path)
	}
	off := w.n
	// The writer must not run out of space after Checkpoint returned
	// (the cache full: the epoch was lost after it was taken): reserve
	// the range's storage now, so that a full file system fails here,
	// unless the file system has room to spare (reserve).
	if err := reserve(w.f, off, n, w.always); err != nil {
		w.err = fmt.Errorf("%s: reserving %d bytes for a snapshot: %w", w.path, n, err)
		return 0, w.err
	}
	if _, err := w.f.Seek(n, io.SeekCurrent); err != nil {
		w.err = fmt.Errorf("%s: %w", w.path, err)
		return 0, w.err
	}
	w.n += n
	return off, nil
}

// WriteAt writes p at off, inside a range Skip left.
func (w *Writer) WriteAt(p []byte, off int64) error {
	if w.err == nil {
		if _, err := w.f.WriteAt(p, off); err != nil {
			w.err = fmt.Errorf("%s: %w", w.path, err)
		}
	}
	return w.err
}

// File is the file being written (for a snapshot writer's pwrite).
func (w *Writer) File() *os.File { return w.f }

// Entry is the manifest entry Close will return, but for the checksum
// (NoChecksum writers only).
func (w *Writer) Entry() File { return File{Rank: w.rank, Name: RankName(w.rank), Size: w.n} }

// Close syncs the file, renames it into place and returns its manifest
// entry. On error the temporary file is removed.
func (w *Writer) Close() (File, error) {
	err := w.err
	if err == nil && w.reuse {
		err = w.f.Truncate(w.n)
	}
	if err == nil {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(w.path+tmpSuffix, w.path)
	}
	if err != nil {
		os.Remove(w.path + tmpSuffix)
		return File{}, err
	}
	f := File{Rank: w.rank, Name: RankName(w.rank), Size: w.n, CRC32C: FormatCRC(w.crc)}
	if w.noCRC {
		f.CRC32C = ""
	}
	return f, nil
}

// Abort drops the file being written.
func (w *Writer) Abort() {
	w.f.Close()
	os.Remove(w.path + tmpSuffix)
}

// Commit writes m as epoch m.Epoch's manifest: to a temporary file, synced,
// renamed, and the directory synced, so after a crash the epoch is either
// committed whole or not at all. Callers commit only after every rank's
// file was closed (synced).
func Commit(prefix string, m *Manifest) error {
	m.Version = Version
	if m.Time.IsZero() {
		m.Time = time.Now().UTC()
	}
	if err := m.validate(); err != nil {
		return fmt.Errorf("commit epoch %d: %w", m.Epoch, err)
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	dir := EpochDir(prefix, m.Epoch)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	final := filepath.Join(dir, ManifestName)
	tmp, err := createTemp(dir, "."+ManifestName+".", tmpSuffix)
	if err != nil {
		return err
	}
	_, err = tmp.Write(append(data, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(dir) // the rank files' renames
	}
	if err == nil {
		err = os.Rename(tmp.Name(), final)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("commit %s: %w", final, err)
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	return syncDir(prefix)
}

// createTemp is os.CreateTemp with the rank files' mode (0644 less the
// umask): CreateTemp's 0600 made a manifest on a group's shared prefix
// unreadable to the other users who can read its rank files.
func createTemp(dir, prefix, suffix string) (*os.File, error) {
	for try := 0; ; try++ {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10)+suffix)
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, os.ErrExist) || try == 100 {
			return f, err
		}
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Epoch is one epoch directory found under a prefix.
type Epoch struct {
	Epoch    int
	Dir      string
	Manifest *Manifest // nil when not committed (or unreadable: Err)
	Err      error     // why the manifest could not be read, if it exists
}

// Committed reports whether the epoch has a valid manifest.
func (e Epoch) Committed() bool { return e.Manifest != nil }

// List returns every epoch directory under prefix, oldest first. A missing
// prefix has no epochs.
func List(prefix string) ([]Epoch, error) {
	ents, err := os.ReadDir(prefix)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Epoch
	for _, de := range ents {
		n, ok := ParseEpochDir(de.Name())
		if !ok || !de.IsDir() {
			continue
		}
		ep := Epoch{Epoch: n, Dir: filepath.Join(prefix, de.Name())}
		m, err := ReadManifest(prefix, n)
		switch {
		case err == nil:
			ep.Manifest = m
		case !errors.Is(err, ErrUncommitted):
			ep.Err = err
		}
		out = append(out, ep)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Epoch < out[j].Epoch })
	return out, nil
}

// Newest is the newest committed epoch under prefix, ErrNoEpoch if none.
func Newest(prefix string) (*Manifest, error) {
	eps, err := List(prefix)
	if err != nil {
		return nil, err
	}
	for i := len(eps) - 1; i >= 0; i-- {
		if eps[i].Committed() {
			return eps[i].Manifest, nil
		}
	}
	return nil, fmt.Errorf("%s: %w", prefix, ErrNoEpoch)
}

// MaxEpoch is the highest epoch number with a directory under prefix,
// committed or not (-1 if none): new epochs take higher numbers so a
// half-written directory is never reused.
func MaxEpoch(prefix string) (int, error) {
	eps, err := List(prefix)
	if err != nil || len(eps) == 0 {
		return -1, err
	}
	return eps[len(eps)-1].Epoch, nil
}

// VerifyFile checks one rank's file against its manifest entry by reading
// it whole. An entry without a checksum (a cache epoch whose flush has not
// computed it) is checked by size only.
func VerifyFile(prefix string, e int, f File) error {
	p := filepath.Join(EpochDir(prefix, e), f.Name)
	if f.CRC32C == "" {
		st, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %w", p, ErrMissing)
		}
		if err != nil {
			return err
		}
		if st.Size() != f.Size {
			return fmt.Errorf("%s: %w: %d bytes, manifest says %d", p, ErrCorrupt, st.Size(), f.Size)
		}
		return nil
	}
	got, err := Checksum(prefix, e, f)
	if err != nil {
		return err
	}
	if got.CRC32C != f.CRC32C {
		return fmt.Errorf("%s: %w: crc32c %s, manifest says %s", p, ErrCorrupt, got.CRC32C, f.CRC32C)
	}
	return nil
}

// Checksum reads rank file f of epoch e whole and returns f with the
// file's CRC-32C; its size must be f.Size.
func Checksum(prefix string, e int, f File) (File, error) {
	p := filepath.Join(EpochDir(prefix, e), f.Name)
	fd, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return f, fmt.Errorf("%s: %w", p, ErrMissing)
	}
	if err != nil {
		return f, err
	}
	defer fd.Close()
	h := crc32.New(crcTable())
	n, err := copyChunks(h, fd)
	if err != nil {
		return f, fmt.Errorf("%s: %w", p, err)
	}
	if n != f.Size {
		return f, fmt.Errorf("%s: %w: %d bytes, manifest says %d", p, ErrCorrupt, n, f.Size)
	}
	f.CRC32C = FormatCRC(h.Sum32())
	return f, nil
}

// Verify checks every file of committed epoch e and returns one error per
// bad rank (nil slice: intact).
func Verify(prefix string, e int) ([]error, error) {
	m, err := ReadManifest(prefix, e)
	if err != nil {
		return nil, err
	}
	var bad []error
	for _, f := range m.Files {
		if err := VerifyFile(prefix, e, f); err != nil {
			bad = append(bad, fmt.Errorf("rank %d: %w", f.Rank, err))
		}
	}
	return bad, nil
}

// Remove deletes epoch e: the manifest first, so an interrupted removal
// leaves an uncommitted directory, never a committed one with files
// missing.
func Remove(prefix string, e int) error {
	dir := EpochDir(prefix, e)
	if err := os.Remove(filepath.Join(dir, ManifestName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := syncDir(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.RemoveAll(dir)
}

// Prune keeps the newest keep committed epochs and removes older ones, and
// every uncommitted directory older than the newest committed epoch (the
// leftovers of interrupted checkpoints). keep < 1 keeps everything.
// Removal happens only behind a committed epoch, so it never leaves the
// prefix without one.
func Prune(prefix string, keep int) error {
	return PruneUnreadable(prefix, keep, nil)
}

// PruneUnreadable is Prune where the committed epochs in unreadable (a
// restart could not read them back) do not count towards the keep newest:
// counting them would remove readable epochs and leave fewer than keep to
// restart from. Such an epoch is removed once keep readable epochs are
// newer.
func PruneUnreadable(prefix string, keep int, unreadable map[int]bool) error {
	eps, err := List(prefix)
	if err != nil || keep < 1 {
		return err
	}
	newest, kept := -1, 0
	var errs []error
	for i := len(eps) - 1; i >= 0; i-- {
		if eps[i].Committed() {
			if newest < 0 {
				newest = eps[i].Epoch
			}
			if unreadable[eps[i].Epoch] {
				if kept < keep {
					continue
				}
			} else if kept++; kept <= keep {
				continue
			}
		} else if newest < 0 || eps[i].Epoch > newest {
			continue // may be in progress
		}
		// One epoch that cannot be removed (a file held open on NFS, an
		// immutable one) must not keep the others: it stopped pruning.
		if err := Remove(prefix, eps[i].Epoch); err != nil {
			errs = append(errs, fmt.Errorf("remove epoch %d: %w", eps[i].Epoch, err))
		}
	}
	return errors.Join(errs...)
}

// CopyFile copies rank file f of epoch e from one prefix to another
// (cache to prefix: the flush), synced and renamed into place, and returns
// the copy's entry. The copy must match f's size and, when f has one, its
// checksum; when f has none, the entry carries the checksum of the bytes
// copied (the source is immutable once written, so they are the bytes the
// application saved).
func CopyFile(from, to string, e int, f File) (File, error) {
	src, err := os.Open(filepath.Join(EpochDir(from, e), f.Name))
	if err != nil {
		return File{}, err
	}
	defer src.Close()
	w, err := Create(to, e, f.Rank)
	if err != nil {
		return File{}, err
	}
	if _, err := copyChunks(w, src); err != nil {
		w.Abort()
		return File{}, err
	}
	got, err := w.Close()
	if err != nil {
		return File{}, err
	}
	if got.Size != f.Size || (f.CRC32C != "" && got.CRC32C != f.CRC32C) {
		os.Remove(filepath.Join(EpochDir(to, e), f.Name))
		return File{}, fmt.Errorf("flush %s: %w: copied %d bytes crc32c %s, expected %d bytes %s",
			filepath.Join(EpochDir(from, e), f.Name), ErrCorrupt, got.Size, got.CRC32C, f.Size, f.CRC32C)
	}
	return got, nil
}

// PartnerName is the directory inside a node-local cache that holds the
// partner copies of other nodes' rank files (docs/ckpt.md, "Partner
// copies"). It is itself laid out as a prefix.
const PartnerName = "partner"

// PartnerDir is the partner-copy prefix inside cache directory cache.
func PartnerDir(cache string) string { return filepath.Join(cache, PartnerName) }

// Ranks lists the ranks whose finished files (not temporary ones) epoch e
// holds under prefix, in increasing order; none when the directory is
// missing.
func Ranks(prefix string, e int) ([]int, error) {
	ents, err := os.ReadDir(EpochDir(prefix, e))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []int
	for _, de := range ents {
		s, ok := strings.CutPrefix(de.Name(), rankPrefix)
		if !ok || !de.Type().IsRegular() || s == "" || strings.Trim(s, "0123456789") != "" {
			continue
		}
		if r, err := strconv.Atoi(s); err == nil && RankName(r) == de.Name() {
			out = append(out, r)
		}
	}
	sort.Ints(out)
	return out, nil
}

// copyChunks copies src to dst writeChunk bytes at a time. (io.Copy from
// an *os.File goes through its WriteTo, which for a destination that is
// not a file or socket copies 32 KiB at a time: eight thousand system
// calls per 256 MiB.)
func copyChunks(dst io.Writer, src io.Reader) (int64, error) {
	return io.CopyBuffer(dst, struct{ io.Reader }{src}, make([]byte, writeChunk))
}
