package api

import (
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
)

// JSONOptions is the JSON form of the API's messages everywhere xlb prints
// them (xlbctl -o json, the status page's /status.json): the proto3 JSON
// mapping with the .proto field names, unset fields included.
var JSONOptions = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// NewService returns the API's service over b for calls in the same
// process: the status page reads the same messages the gRPC clients get.
func NewService(b Backend) pb.XLBServer { return &service{b: b, now: time.Now} }
