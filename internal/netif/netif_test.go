package netif

import (
	"strings"
	"testing"
)

func TestIPv4(t *testing.T) {
	ip, err := IPv4("lo")
	if err != nil || ip.String() != "127.0.0.1" {
		t.Errorf("lo: %v, %v; want 127.0.0.1", ip, err)
	}
	_, err = IPv4("gompi-none0")
	if err == nil || !strings.Contains(err.Error(), `no network interface "gompi-none0" here (interfaces: lo`) {
		t.Errorf("unknown interface: %v", err)
	}
}
