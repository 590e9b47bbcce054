package netif

import (
	"strings"
	"testing"
)

func TestAddr(t *testing.T) {
	ip, err := Addr("lo")
	if err != nil || ip.String() != "127.0.0.1" {
		t.Errorf("lo: %v, %v; want 127.0.0.1", ip, err)
	}
	_, err = Addr("gompi-none0")
	if err == nil || !strings.Contains(err.Error(), `no network interface "gompi-none0" here (interfaces: lo`) {
		t.Errorf("unknown interface: %v", err)
	}
}
