package layout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// PrefixOwnerFile names, in a prefix, the record of the running job that
// writes it.
const PrefixOwnerFile = "OWNER"

// ErrPrefixInUse: another running job writes the checkpoint prefix.
var ErrPrefixInUse = errors.New("checkpoint prefix in use by another running job")

// Owner is a prefix's owner record: which job, where, and a counter the
// owner increments at each refresh (a reader on another host tells a
// live owner by seeing it change, on its own clock: no clocks compared).
type Owner struct {
	Job  string `json:"job"`  // GOMPI_JOBID (a new one per launch)
	Host string `json:"host"` // host name, for messages
	// Node tells hosts apart for the liveness check by pid: boot id and
	// pid namespace (containers sharing a host name differ).
	Node  string `json:"node"`
	Pid   int    `json:"pid"`
	Start string `json:"start"` // the process's start time (/proc/PID/stat), against pid reuse
	Seq   uint64 `json:"seq"`
	// Launch, when the launcher gives one (EnvLaunch), is the same for
	// every relaunch of one gompiexec -max-restarts run, which starts
	// only after the previous launch ended: its record is taken over at
	// once, even from another node.
	Launch string `json:"launch,omitempty"`
}

// EnvLaunch names the launcher's id of a run, kept across its relaunches.
const EnvLaunch = "GOMPI_CKPT_LAUNCH"

func (o Owner) String() string {
	job := o.Job
	if job == "" {
		job = "(no job id)"
	}
	return fmt.Sprintf("job %s, pid %d on host %s", job, o.Pid, o.Host)
}

// ThisProcess is the record of the calling process as an owner.
func ThisProcess(job string) Owner {
	host, _ := os.Hostname()
	return Owner{Job: job, Host: host, Node: nodeName(), Pid: os.Getpid(), Start: procStart(os.Getpid()), Launch: os.Getenv(EnvLaunch)}
}

// nodeName identifies this host, pid and mount namespace ("" if
// unknown): where a pid names the same process and the prefix is the
// same mount. Another mount namespace (a container) is treated as
// another node (its owner is watched, not looked up by pid).
func nodeName() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	name := strings.TrimSpace(string(boot))
	for _, ns := range []string{"pid", "mnt"} {
		l, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			return ""
		}
		name += "/" + l
	}
	return name
}

// procStart is field 22 of /proc/PID/stat ("" if the process is gone).
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces: count after its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return "" // a zombie is dead: killed, not yet reaped
	}
	return f[19]
}

// deadHere: o ran on this node and its process is gone (or its pid now
// belongs to another process).
func (o Owner) deadHere() bool {
	if o.Node == "" || o.Node != nodeName() {
		return false
	}
	return procStart(o.Pid) != o.Start
}

// aliveHere: o runs on this node, as the same process.
func (o Owner) aliveHere() bool {
	return o.Node != "" && o.Node == nodeName() && o.Start != "" && procStart(o.Pid) == o.Start
}

// PrefixLock is a job's ownership of a prefix (ClaimPrefix).
type PrefixLock struct {
	path string
	mu   sync.Mutex
	me   Owner
	lost error // set once the record was found to be another's
	done bool  // released
}

// DefaultOwnerStale is how long the owner record of a job on another host
// must stay unchanged before it is judged stale (package ckpt's default;
// docs/ckpt.md, "One job per prefix").
const DefaultOwnerStale = 60 * time.Second

// ReadOwner reads prefix's owner record and when it was last refreshed
// (by the file system's clock); an error satisfying errors.Is(err,
// fs.ErrNotExist) when there is none.
func ReadOwner(prefix string) (Owner, time.Time, error) {
	path := filepath.Join(prefix, PrefixOwnerFile)
	o, _, err := readOwner(path)
	if err != nil {
		return o, time.Time{}, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return o, time.Time{}, err
	}
	return o, st.ModTime(), nil
}

// MayRun: o's job may still be running as far as this host can tell
// without watching the record: its process here is alive, or, on another
// node, the record was refreshed (mod) within stale.
func (o Owner) MayRun(mod time.Time, stale time.Duration) bool {
	if o.aliveHere() {
		return true
	}
	if o.deadHere() {
		return false
	}
	return time.Since(mod) < stale
}

func readOwner(path string) (Owner, []byte, error) {
	var o Owner
	b, err := os.ReadFile(path)
	if err != nil {
		return o, nil, err
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return o, b, fmt.Errorf("%s: %w", path, err)
	}
	return o, b, nil
}

// ClaimPrefix makes me the owner of prefix: it creates the record with
// O_EXCL (which NFS and SFTP servers, sshfs's, honour between clients,
// unlike flock). When another job's record is there:
//   - on this node, with its process alive: ErrPrefixInUse at once;
//   - on this node, its process gone: taken over (say is told why);
//   - on another node: its Seq is watched for up to stale; a change means
//     a live owner (ErrPrefixInUse), none that it is dead (taken over).
//
// The owner must call Refresh more often than stale (RefreshEvery).
func ClaimPrefix(ctx context.Context, prefix string, me Owner, stale time.Duration, say func(string)) (*PrefixLock, error) {
	path := filepath.Join(prefix, PrefixOwnerFile)
	me.Seq = 1
	rec, err := json.Marshal(me)
	if err != nil {
		return nil, err
	}
	rec = append(rec, '\n')
	for {
		err := create(path, rec)
		if err == nil {
			return &PrefixLock{path: path, me: me}, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, err
		}
		o, seen, err := readOwner(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // released meanwhile
		}
		why := ""
		switch {
		case err != nil:
			// Empty (being written by create's fallback, or left so by a
			// crash there) or damaged: nothing says whose it is, so watch
			// it as another node's record, and say so (the empty one was
			// watched without a word, and a damaged one failed every
			// start with a bare JSON error).
			o = Owner{} // what a type error left half decoded
			what := "empty"
			if len(seen) > 0 {
				what = fmt.Sprintf("unreadable (%v)", errors.Unwrap(err))
			}
			say(fmt.Sprintf("ckpt: %s is %s: watching it for up to %v to see whether a job still writes it", path, what, stale))
			why, err = watch(ctx, path, seen, o, stale)
		case me.Launch != "" && o.Launch == me.Launch && o.Job != me.Job:
			why = "a previous launch of this run (it was relaunched)"
		case o.aliveHere() && !exits(ctx, o, min(3*time.Second, stale/10)):
			return nil, fmt.Errorf("%w: %s is held by %s, running (its record: %s)", ErrPrefixInUse, prefix, o, path)
		case o.deadHere():
			why = "its process is gone"
		default:
			// The whole job waits here: say so, or a start that takes a
			// minute looks hung.
			say(fmt.Sprintf("ckpt: %s is held by %s on another host: watching it for up to %v to see whether that job still runs", path, o, stale))
			why, err = watch(ctx, path, seen, o, stale)
		}
		if err != nil {
			return nil, err
		}
		if why == "" {
			continue // changed hands while watched: look again
		}
		if err := takeOver(path, seen); err != nil {
			if errors.Is(err, errChanged) {
				continue
			}
			return nil, err
		}
		say(fmt.Sprintf("ckpt: took over %s from %s: %s", path, describe(o, seen), why))
	}
}

// exits: o's process (on this node) ends within grace. A relaunch under
// -max-restarts may start while the failed launch's rank 0, killed by its
// proxy, is still exiting.
func exits(ctx context.Context, o Owner, grace time.Duration) bool {
	deadline := time.Now().Add(grace)
	for o.aliveHere() {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}

// create makes the record at path with content rec, failing with
// os.ErrExist if there is one: a complete temporary file hard-linked to
// the name (link never replaces a file; NFS and sftp, sshfs's, do it on
// the server), so that no reader ever sees it empty. Where links are not
// supported, an O_EXCL create then the write.
func create(path string, rec []byte) error {
	tmp := fmt.Sprintf("%s.new.%d.%d", path, os.Getpid(), time.Now().UnixNano())
	err := os.WriteFile(tmp, rec, 0o644)
	if err == nil {
		err = os.Link(tmp, path)
	}
	os.Remove(tmp)
	if err == nil || errors.Is(err, os.ErrExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(rec)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		if errors.Is(err, os.ErrExist) {
			err = fmt.Errorf("%s: %v", path, err) // not "exists": the caller would look again
		}
	}
	return err
}

func describe(o Owner, seen []byte) string {
	if o.Pid == 0 {
		return fmt.Sprintf("a record %q", bytes.TrimSpace(seen))
	}
	return o.String()
}

// watch waits up to stale for the record at path (content seen) to
// change. A refresh by the same owner is ErrPrefixInUse; a record of
// another owner, or none, asks the caller to look again (why ""); no
// change at all says why it is stale.
func watch(ctx context.Context, path string, seen []byte, o Owner, stale time.Duration) (string, error) {
	poll := min(max(stale/20, 10*time.Millisecond), time.Second)
	deadline := time.Now().Add(stale)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(poll):
		}
		n, b, err := readOwner(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return "", nil
		case bytes.Equal(b, seen):
			if o.deadHere() {
				return "its process is gone", nil
			}
			continue
		case err == nil && n.Job == o.Job && n.Pid == o.Pid && n.Node == o.Node && o.Pid != 0:
			return "", fmt.Errorf("%w: %s is held by %s, running (it refreshed its record %s while this job waited)", ErrPrefixInUse, filepath.Dir(path), o, path)
		default:
			return "", nil
		}
	}
	return fmt.Sprintf("not refreshed for %v", stale), nil
}

var errChanged = errors.New("owner record changed")

// takeOver removes the stale record whose content is seen. Rename first,
// then check what was renamed: two jobs taking over at once must not
// remove the record one of them has just created. If it was not the
// stale record, it is put back (link fails if a third one exists, in
// which case the renamed one was superseded anyway).
func takeOver(path string, seen []byte) error {
	aside := fmt.Sprintf("%s.stale.%d.%d", path, os.Getpid(), time.Now().UnixNano())
	if err := os.Rename(path, aside); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return errChanged
		}
		return err
	}
	b, _ := os.ReadFile(aside)
	if !bytes.Equal(b, seen) {
		os.Link(aside, path)
		os.Remove(aside)
		return errChanged
	}
	return os.Remove(aside)
}

// Refresh rewrites the record with the next Seq, showing watchers on
// other nodes that the owner lives. If the record is no longer this
// owner's (taken over by a job that judged it stale), it is left alone
// and the error says whose it is, from then on.
func (l *PrefixLock) Refresh() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil || l.done {
		return l.lost
	}
	o, _, err := readOwner(l.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err // transient (a file system error): the next refresh tries again
	}
	if err != nil || o.Job != l.me.Job || o.Pid != l.me.Pid || o.Node != l.me.Node || o.Start != l.me.Start {
		who := "nobody (it was removed)"
		if err == nil {
			who = o.String()
		}
		l.lost = fmt.Errorf("%w: %s now belongs to %s, not to this job (%s): two jobs write the prefix", ErrPrefixInUse, l.path, who, l.me)
		return l.lost
	}
	l.me.Seq = o.Seq + 1
	rec, err := json.Marshal(l.me)
	if err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.tmp.%d", l.path, l.me.Pid)
	if err := os.WriteFile(tmp, append(rec, '\n'), 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, l.path)
}

// Lost is the error Refresh found, if the record became another's.
func (l *PrefixLock) Lost() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// Release removes the record if it is still this owner's.
func (l *PrefixLock) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil || l.done {
		return
	}
	l.done = true
	if o, _, err := readOwner(l.path); err == nil && o.Pid == l.me.Pid && o.Node == l.me.Node && o.Job == l.me.Job {
		os.Remove(l.path)
	}
}
