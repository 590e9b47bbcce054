//go:build !linux

package layout

import "os"

func fallocate(*os.File, int64) error { return errNoFallocate }

func reserve(*os.File, int64, int64, bool) error { return nil }
