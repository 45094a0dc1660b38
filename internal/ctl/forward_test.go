package ctl

import (
	"testing"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
)

// TestForwardColumn: ipvsadm's words for each method, Local first.
func TestForwardColumn(t *testing.T) {
	for _, tc := range []struct {
		b    *pb.Backend
		want string
	}{
		{&pb.Backend{Encap: "gre"}, "Tunnel"},
		{&pb.Backend{Encap: "ipip"}, "Tunnel"},
		{&pb.Backend{Encap: "gue"}, "Tunnel"},
		{&pb.Backend{Encap: "dr"}, "Route"},
		{&pb.Backend{Encap: "nat"}, "Masq"},
		{&pb.Backend{Encap: "dr", Local: true}, "Local"},
		{&pb.Backend{Encap: "nat", Local: true}, "Local"},
		{&pb.Backend{}, "-"},
	} {
		if got := forward(tc.b); got != tc.want {
			t.Errorf("forward(encap %q, local %v) = %q, want %q", tc.b.Encap, tc.b.Local, got, tc.want)
		}
	}
}
