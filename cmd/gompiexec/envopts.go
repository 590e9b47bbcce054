package main

import (
	"strconv"
	"strings"
)

// Hydra's options for what the ranks' environment says about their host:
// hostname propagation (MPIR_CVAR_CH3_INTERFACE_HOSTNAME) and GPUs per
// rank (CUDA_VISIBLE_DEVICES).
type envOpts struct {
	hostnameProp string // -enable/-disable-hostname-propagation: "", "on", "off"
	gpusPerProc  *int   // -gpus-per-proc N; nil: AUTO (sets nothing)
	profile      bool   // -profile
}

func init() {
	prop := func(v string) optSpec {
		return optSpec{0, false, func(o *options, _ *segment, _ []string) error {
			if err := o.once("hostname-propagation", "hostname-propagation"); err != nil {
				return err
			}
			o.hostnameProp = v
			return nil
		}}
	}
	alias(optSpec{0, false, func(o *options, _ *segment, _ []string) error {
		o.profile = true
		return nil
	}}, "profile")
	alias(prop("on"), "enable-hostname-propagation")
	alias(prop("off"), "disable-hostname-propagation")
	alias(optSpec{1, false, func(o *options, _ *segment, v []string) error {
		if err := o.once("gpus-per-proc", "gpus-per-proc"); err != nil {
			return err
		}
		if strings.EqualFold(v[0], "auto") {
			o.gpusPerProc = nil
			return nil
		}
		// Hydra's atoi takes "x" for 0; a typo should not hide every GPU.
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 0 || n > 1024 {
			return usagef("-gpus-per-proc %q: want AUTO or a number of GPUs from 0 to 1024", v[0])
		}
		o.gpusPerProc = &n
		return nil
	}}, "gpus-per-proc", "g")
}

// hostnamePropagation decides, as Hydra does, whether ranks get their
// host's name: the option, else HYDRA_HOSTNAME_PROPAGATION, else on
// unless -iface (or HYDRA_IFACE) chose an interface; asking for it
// together with an interface is an error, since the two say different
// things to MPICH's ch3.
func hostnamePropagation(o *options, getenv func(string) string) (bool, error) {
	v, from := o.hostnameProp, "-enable-hostname-propagation"
	if v == "" {
		if e := getenv("HYDRA_HOSTNAME_PROPAGATION"); e != "" {
			b, ok := parseEnvBool(e)
			if !ok {
				return false, usagef("HYDRA_HOSTNAME_PROPAGATION=%s: want yes or no (1, 0, true, false, on, off)", e)
			}
			v, from = "off", "HYDRA_HOSTNAME_PROPAGATION="+e
			if b {
				v = "on"
			}
		}
	}
	switch {
	case v == "off":
		return false, nil
	case v == "on" && o.place.iface != "":
		return false, usagef("%s and -iface %s (or HYDRA_IFACE) both choose what MPICH ranks advertise: give one", from, o.place.iface)
	}
	return o.place.iface == "", nil
}

// parseEnvBool is envBool that also says whether v was a yes/no word.
func parseEnvBool(v string) (value, ok bool) {
	switch strings.ToLower(v) {
	case "1", "yes", "true", "on", "y", "t":
		return true, true
	case "0", "no", "false", "off", "n", "f":
		return false, true
	}
	return false, false
}
