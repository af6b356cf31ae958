// Package extproc sends one request through an EPP's ext_proc service as Envoy
// does (the request headers, then the body), with a W3C trace context of the
// caller's, and returns what the EPP answered. It is the end-to-end suite's way to
// put a request through a deployed EPP; llmdrouter/internal/extproc, in the module
// that builds the EPP, holds requests in flight for its own tests.
package extproc

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Answer is what the EPP answered a request with.
type Answer struct {
	// Endpoint is its pick (x-gateway-destination-endpoint), "" when it refused.
	Endpoint string
	// Refused is the status of its immediate response (e.g. 503 with no model
	// server to pick), 0 when it picked an endpoint.
	Refused int
}

func (a Answer) String() string {
	if a.Endpoint != "" {
		return "routed to " + a.Endpoint
	}
	return fmt.Sprintf("refused with status %d", a.Refused)
}

// Send sends a completion request to the EPP's ext_proc port at addr
// (127.0.0.1:<port>), over TLS without verifying the EPP's certificate (it makes
// its own: --secure-serving, the EPP's default), with the header traceparent (a W3C
// trace context; "" for none), and returns the EPP's answer to it, waiting at most
// timeout. The request ends then, as a client that went away.
func Send(addr, traceparent string, timeout time.Duration) (Answer, error) {
	creds := credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the EPP's self-signed certificate, on 127.0.0.1
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return Answer{}, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		return Answer{}, err
	}
	headers := []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")},
		{Key: ":path", RawValue: []byte("/v1/completions")},
		{Key: "content-type", RawValue: []byte("application/json")},
		{Key: "x-request-id", RawValue: []byte(fmt.Sprintf("e2e-%d", time.Now().UnixNano()))},
	}
	if traceparent != "" {
		headers = append(headers, &corev3.HeaderValue{Key: "traceparent", RawValue: []byte(traceparent)})
	}
	body, _ := json.Marshal(map[string]any{"model": "test-model", "prompt": "hello", "max_tokens": 8})
	for _, req := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: headers}}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}},
	} {
		if err := stream.Send(req); err != nil {
			return Answer{}, fmt.Errorf("sending to the EPP at %s: %w", addr, err)
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return Answer{}, fmt.Errorf("the EPP at %s did not answer: %w", addr, err)
		}
		if ir := resp.GetImmediateResponse(); ir != nil {
			return Answer{Refused: int(ir.GetStatus().GetCode())}, nil
		}
		if h := resp.GetRequestHeaders(); h != nil {
			for _, hv := range h.GetResponse().GetHeaderMutation().GetSetHeaders() {
				if hv.GetHeader().GetKey() == "x-gateway-destination-endpoint" {
					return Answer{Endpoint: string(hv.GetHeader().GetRawValue()) + hv.GetHeader().GetValue()}, nil
				}
			}
		}
	}
}
