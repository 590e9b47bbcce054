// Package atomicfile writes files that readers see whole or not at all.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to path with mode perm: into a temporary file of a
// random name in the same directory (hosts sharing a home may write at
// once), then renamed over path. On error nothing is left behind.
func Write(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), perm)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
