package ctl

import pb "github.com/xlbproject/xlb/api/xlb/v1"

// forward is a backend's Forward column, in ipvsadm's words: Local for
// the node itself, Route (dr), Masq (nat), Tunnel (gre, ipip, gue).
func forward(b *pb.Backend) string {
	if b.GetLocal() {
		return "Local"
	}
	switch b.GetEncap() {
	case "dr":
		return "Route"
	case "nat":
		return "Masq"
	case "gre", "ipip", "gue":
		return "Tunnel"
	}
	return "-"
}
