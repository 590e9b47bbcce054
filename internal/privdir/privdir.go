// Package privdir creates and checks the per-user directories gompi keeps
// under $TMPDIR (gompi-UID): the persistent proxy's socket and the shared
// hardware topology live there. /tmp is shared by every user, so a
// directory that already exists is trusted only if it is ours alone: a
// real directory (not a symlink), owned by our uid, that nobody else may
// enter or write. Otherwise another user could plant a socket of theirs,
// or the topology XML that every MPICH rank loads.
package privdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrNotPrivate is returned (wrapped) for an existing path that is not a
// private directory of this user.
var ErrNotPrivate = errors.New("not a private directory")

// Default is $TMPDIR/gompi-UID.
func Default() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("gompi-%d", os.Getuid()))
}

// Ensure creates dir with mode 0700, or checks that an existing one is a
// directory (not a symlink) owned by this uid with no access for group or
// others. The parent must exist.
func Ensure(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return Check(dir)
}

// Check is Ensure without creating dir.
func Check(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() || fi.Mode().Perm()&0o077 != 0 {
		uid := -1
		if ok {
			uid = int(st.Uid)
		}
		return fmt.Errorf("%s is %w of uid %d (owner %d, mode %v); remove it", dir, ErrNotPrivate, os.Getuid(), uid, fi.Mode())
	}
	return nil
}
