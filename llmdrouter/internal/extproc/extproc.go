// Package extproc is a client of the EPP's ext_proc service for tests: it sends a
// request as Envoy does (headers, then the body), reads the EPP's pick of an
// endpoint, and keeps the request open, in flight on that endpoint, until End or
// Abort.
package extproc

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Request is one request an Envoy sends the EPP over ext_proc, held open after the
// EPP picked its endpoint: the EPP counts it in flight on that endpoint until it
// ends.
type Request struct {
	conn     *grpc.ClientConn
	stream   extprocv3.ExternalProcessor_ProcessClient
	cancel   context.CancelFunc
	Endpoint string // the EPP's pick: x-gateway-destination-endpoint, ip:port
}

var requestIDs atomic.Int64

// Send sends a completion request's headers and body to the EPP at addr
// (127.0.0.1:<grpc port>) over plain gRPC (an EPP run with --secure-serving=false)
// and waits, up to 10 s, for the EPP's answer naming the endpoint; the request stays
// open (in flight) until End or Abort.
func Send(addr string) (*Request, error) {
	return send(addr, insecure.NewCredentials())
}

// SendTLS is Send to an EPP that serves TLS (its default, with a certificate of its
// own making, which is not verified: the test reaches it through a port-forward).
func SendTLS(addr string) (*Request, error) {
	return send(addr, credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec // the EPP's self-signed certificate, on 127.0.0.1
}

func send(addr string, creds credentials.TransportCredentials) (*Request, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Request{conn: conn, cancel: cancel}
	fail := func(err error) (*Request, error) { r.Abort(); return nil, err }
	r.stream, err = extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		return fail(err)
	}
	id := fmt.Sprintf("test-%d-%d", time.Now().UnixNano(), requestIDs.Add(1))
	body, _ := json.Marshal(map[string]any{"model": "test-model", "prompt": "hello", "max_tokens": 8})
	headers := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")},
		{Key: ":path", RawValue: []byte("/v1/completions")},
		{Key: "content-type", RawValue: []byte("application/json")},
		{Key: "x-request-id", RawValue: []byte(id)},
	}}
	if err := r.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headers}}}); err != nil {
		return fail(err)
	}
	if err := r.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}}); err != nil {
		return fail(err)
	}
	got := make(chan error, 1)
	go func() {
		for {
			resp, err := r.stream.Recv()
			if err != nil {
				got <- err
				return
			}
			if ir := resp.GetImmediateResponse(); ir != nil {
				got <- fmt.Errorf("the EPP refused the request: %s %s", ir.GetStatus().GetCode(), ir.GetBody())
				return
			}
			if h := resp.GetRequestHeaders(); h != nil {
				for _, hv := range h.GetResponse().GetHeaderMutation().GetSetHeaders() {
					if hv.GetHeader().GetKey() == "x-gateway-destination-endpoint" {
						r.Endpoint = string(hv.GetHeader().GetRawValue())
						if r.Endpoint == "" {
							r.Endpoint = hv.GetHeader().GetValue()
						}
					}
				}
				got <- nil
				return
			}
		}
	}()
	select {
	case err := <-got:
		if err != nil {
			return fail(err)
		}
	case <-time.After(10 * time.Second):
		return fail(fmt.Errorf("no answer from the EPP at %s within 10 s", addr))
	}
	if r.Endpoint == "" {
		return fail(fmt.Errorf("the EPP at %s answered without x-gateway-destination-endpoint", addr))
	}
	return r, nil
}

// End ends the request as Envoy does once the model server answered: the response
// headers, then the response body with end of stream.
func (r *Request) End() {
	_ = r.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte("200")}, {Key: "content-type", RawValue: []byte("application/json")}}}}}})
	_ = r.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
		Body: []byte(`{"choices":[{"text":"hi"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`), EndOfStream: true}}})
	_ = r.stream.CloseSend()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := r.stream.Recv(); err != nil {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	r.Abort()
}

// Abort drops the request (a client that went away).
func (r *Request) Abort() {
	r.cancel()
	_ = r.conn.Close()
}
