package api

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/config"
)

// toStatus maps a Backend error to a gRPC status (see Backend).
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err // already a status (the server's own validation)
	}
	if list := configErrors(err); list != nil {
		st := status.New(codes.InvalidArgument, "config rejected: "+err.Error())
		details := &pb.ConfigErrors{}
		for _, e := range list {
			ce := &pb.ConfigError{
				Field: e.Field, Line: uint32(max(e.Line, 0)), Column: uint32(max(e.Column, 0)),
				Message: e.Msg, Source: e.Source,
			}
			if e.Err != nil {
				ce.Kind = e.Err.Error()
			}
			details.Errors = append(details.Errors, ce)
		}
		if withDetails, derr := st.WithDetails(details); derr == nil {
			st = withDetails
		}
		return st.Err()
	}
	code := codes.Internal
	switch {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, ErrInvalidArgument):
		code = codes.InvalidArgument
	case errors.Is(err, ErrFailedPrecondition):
		code = codes.FailedPrecondition
	case errors.Is(err, ErrUnavailable):
		code = codes.Unavailable
	case errors.Is(err, ErrUnimplemented):
		code = codes.Unimplemented
	}
	return status.Error(code, err.Error())
}

// configErrors returns the config problems err holds (an ErrorList or a
// single *config.Error, possibly wrapped), or nil.
func configErrors(err error) config.ErrorList {
	var list config.ErrorList
	if errors.As(err, &list) && len(list) > 0 {
		return list
	}
	var one *config.Error
	if errors.As(err, &one) {
		return config.ErrorList{one}
	}
	return nil
}

// invalid is an INVALID_ARGUMENT status for a malformed request.
func invalid(format string, args ...any) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf(format, args...))
}

// ConfigErrorsOf returns the ConfigErrors detail of an ApplyConfig failure,
// or nil.
func ConfigErrorsOf(err error) []*pb.ConfigError {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if ce, ok := d.(*pb.ConfigErrors); ok {
			return ce.Errors
		}
	}
	return nil
}
