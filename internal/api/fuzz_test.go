package api_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/api/apitest"
)

// rawCodec sends the fuzzer's bytes as they are, so the server's own
// protobuf decoding and request validation see arbitrary wire input.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// fuzzMethods are the API's calls and their request types; the fuzzer's
// first byte picks one.
var fuzzMethods = []struct {
	name string
	req  func() proto.Message
}{
	{pb.XLB_Status_FullMethodName, func() proto.Message { return &pb.StatusRequest{} }},
	{pb.XLB_ListServices_FullMethodName, func() proto.Message { return &pb.ListServicesRequest{} }},
	{pb.XLB_ListBackends_FullMethodName, func() proto.Message { return &pb.ListBackendsRequest{} }},
	{pb.XLB_ApplyConfig_FullMethodName, func() proto.Message { return &pb.ApplyConfigRequest{} }},
	{pb.XLB_SetBackend_FullMethodName, func() proto.Message { return &pb.SetBackendRequest{} }},
	{pb.XLB_Counters_FullMethodName, func() proto.Message { return &pb.CountersRequest{} }},
	{pb.XLB_ConntrackDump_FullMethodName, func() proto.Message { return &pb.ConntrackDumpRequest{} }},
	{pb.XLB_Explain_FullMethodName, func() proto.Message { return &pb.ExplainRequest{} }},
	{pb.XLB_NodeDrain_FullMethodName, func() proto.Message { return &pb.NodeDrainRequest{} }},
	{pb.XLB_NodeUndrain_FullMethodName, func() proto.Message { return &pb.NodeUndrainRequest{} }},
}

// FuzzAPIRequests sends arbitrary bytes as the request of every API call
// to a real server (unix socket, the fake backend): each call answers,
// either with a response or with a status whose code says the request was
// refused (never Internal or Unknown: bad input is the caller's error,
// named as such), and the server keeps serving. The one exception is gRPC's
// own: bytes that are not a protobuf message of the request's type are
// refused by gRPC before our code runs, as Internal "error unmarshalling
// request". CI runs it for a bounded
// time (make fuzz); plain `go test` runs the seeds.
func FuzzAPIRequests(f *testing.F) {
	seeds := []proto.Message{
		&pb.StatusRequest{},
		&pb.SetBackendRequest{Address: "10.0.0.1", Action: &pb.SetBackendRequest_Weight{Weight: 3}},
		&pb.SetBackendRequest{Address: "not an address", Action: &pb.SetBackendRequest_Drain{Drain: true}},
		&pb.ConntrackDumpRequest{Backend: "2001:db8::1", Limit: 10, State: pb.ConntrackState_CONNTRACK_STATE_SYN},
		&pb.ExplainRequest{Src: "192.0.2.1:1000", Dst: "10.0.0.100:80", Protocol: pb.Protocol_PROTOCOL_TCP, TcpFlags: 2},
		&pb.ApplyConfigRequest{Yaml: []byte("node: {name: a}\n"), DryRun: true},
		&pb.CountersRequest{},
	}
	for i, m := range seeds {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(i*3), b)
	}
	path := filepath.Join(f.TempDir(), "xlbd.sock")
	srv, err := api.Listen(apitest.New(), api.Options{Socket: path, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ctx) }()
	f.Cleanup(func() { cancel(); srv.Close(); <-done })
	conn, err := grpc.NewClient("unix:"+path, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { conn.Close() })

	f.Fuzz(func(t *testing.T, which byte, req []byte) {
		m := fuzzMethods[int(which)%len(fuzzMethods)]
		method := m.name
		decodes := proto.Unmarshal(req, m.req()) == nil
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var reply []byte
		err := conn.Invoke(cctx, method, &req, &reply)
		if err == nil {
			return
		}
		st, ok := status.FromError(err)
		if !ok {
			t.Fatalf("%s: not a status: %v", method, err)
		}
		switch st.Code() {
		case codes.Internal:
			if decodes || !strings.Contains(st.Message(), "error unmarshalling request") {
				t.Fatalf("%s with % x: %v (want a refusal of the request)", method, req, err)
			}
		case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.OutOfRange, codes.ResourceExhausted:
		default:
			t.Fatalf("%s with % x: %v (want a refusal of the request)", method, req, err)
		}
		// The server still answers.
		var ok2 []byte
		if err := conn.Invoke(cctx, pb.XLB_Status_FullMethodName, new([]byte), &ok2); err != nil {
			t.Fatalf("status after %s: %v", method, err)
		}
	})
}
