// Package extproc is a client of the EPP's ext_proc service that acts as Envoy for
// tests and benchmarks: it sends a request's headers, then its body, reads the EPP's
// pick of an endpoint (which the EPP gives only once the body ended), keeps the
// request in flight on that endpoint, and ends it with the model server's response
// (its status as Envoy sends it, `:status`, and its body), or drops it.
package extproc

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// DestinationHeader is the header, and the key of the envoy.lb dynamic metadata,
// that carries the EPP's pick (ip:port).
const DestinationHeader = "x-gateway-destination-endpoint"

// lbNamespace is the dynamic metadata namespace Envoy's original-destination load
// balancer reads.
const lbNamespace = "envoy.lb"

// Client is a connection to one EPP's ext_proc service; its requests share it, as
// an Envoy's share its HTTP/2 connection.
type Client struct {
	conn *grpc.ClientConn
	addr string
}

// Dial connects to the EPP's ext_proc service at addr (127.0.0.1:<grpc port>) over
// plain gRPC (an EPP run with --secure-serving=false).
func Dial(addr string) (*Client, error) {
	return dial(addr, insecure.NewCredentials())
}

func dial(addr string, creds credentials.TransportCredentials) (*Client, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn, addr: addr}, nil
}

// DialTLS is Dial for an EPP that serves TLS (its default, with a certificate of its
// own making, which is not verified: a test reaches it through a port-forward).
func DialTLS(addr string) (*Client, error) {
	return dial(addr, credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec // the EPP's self-signed certificate, on 127.0.0.1
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Call is an HTTP request as Envoy passes it to the EPP: a POST of a JSON body to
// Path, with the request ID ID (the EPP's per-request state is keyed by it).
type Call struct {
	Path string
	Body []byte
	ID   string
	// Headers are further request headers.
	Headers map[string]string
}

// Request is one request through the EPP, in flight after the EPP picked its
// endpoint: the EPP counts it on that endpoint until Respond, End or Abort.
type Request struct {
	stream    extprocv3.ExternalProcessor_ProcessClient
	cancel    context.CancelFunc
	responses chan received
	conn      *grpc.ClientConn // closed with the request when the request dialed it
	// Endpoint is the EPP's pick, ip:port, from the x-gateway-destination-endpoint
	// header.
	Endpoint string
	// LBEndpoint is the pick as the envoy.lb dynamic metadata gives it (what
	// Envoy's original-destination cluster reads).
	LBEndpoint string
	// Body is the request body as the EPP passes it on (its streamed body
	// mutations): what Envoy sends the endpoint.
	Body []byte
}

type received struct {
	resp *extprocv3.ProcessingResponse
	err  error
}

// Route sends the call's headers, then its body in one message with end of stream,
// and waits (until ctx ends) for the EPP's answer to the headers, which names the
// endpoint, and for its answers to the body, which carry the body on. The request
// stays in flight until Respond, End or Abort.
func (c *Client) Route(ctx context.Context, call Call) (*Request, error) {
	sctx, cancel := context.WithCancel(context.Background())
	r := &Request{cancel: cancel, responses: make(chan received, 8)}
	var err error
	r.stream, err = extprocv3.NewExternalProcessorClient(c.conn).Process(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	go r.receive()
	fail := func(err error) (*Request, error) { r.Abort(); return nil, err }
	hs := []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")},
		{Key: ":path", RawValue: []byte(call.Path)},
		{Key: ":authority", RawValue: []byte("gateway")},
		{Key: "content-type", RawValue: []byte("application/json")},
		{Key: "content-length", RawValue: []byte(strconv.Itoa(len(call.Body)))},
		{Key: "x-request-id", RawValue: []byte(call.ID)},
	}
	for k, v := range call.Headers {
		hs = append(hs, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	if err := r.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}}}}); err != nil {
		return fail(err)
	}
	if err := r.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: call.Body, EndOfStream: true}}}); err != nil {
		return fail(err)
	}
	// The answer to the headers comes once the body ended; then the body's.
	for gotHeaders, bodyDone := false, false; !gotHeaders || !bodyDone; {
		resp, err := r.next(ctx)
		if err != nil {
			return fail(fmt.Errorf("the EPP at %s: %w", c.addr, err))
		}
		switch {
		case resp.GetRequestHeaders() != nil:
			gotHeaders = true
			for _, hv := range resp.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
				if hv.GetHeader().GetKey() == DestinationHeader {
					r.Endpoint = string(hv.GetHeader().GetRawValue())
					if r.Endpoint == "" {
						r.Endpoint = hv.GetHeader().GetValue()
					}
				}
			}
			if lb := resp.GetDynamicMetadata().GetFields()[lbNamespace]; lb != nil {
				r.LBEndpoint = lb.GetStructValue().GetFields()[DestinationHeader].GetStringValue()
			}
			if r.Endpoint == "" {
				return fail(fmt.Errorf("the EPP at %s answered without %s", c.addr, DestinationHeader))
			}
		case resp.GetRequestBody() != nil:
			m := resp.GetRequestBody().GetResponse().GetBodyMutation()
			switch {
			case m.GetStreamedResponse() != nil:
				r.Body = append(r.Body, m.GetStreamedResponse().GetBody()...)
				bodyDone = m.GetStreamedResponse().GetEndOfStream()
			case m.GetBody() != nil:
				r.Body, bodyDone = m.GetBody(), true
			default: // no mutation: the body goes on as it was
				r.Body, bodyDone = call.Body, true
			}
		}
	}
	return r, nil
}

// receive reads the EPP's answers until the stream ends.
func (r *Request) receive() {
	for {
		resp, err := r.stream.Recv()
		r.responses <- received{resp, err}
		if err != nil {
			return
		}
	}
}

// errRefused is the error of an immediate response: the EPP refused the request.
var errRefused = errors.New("the EPP refused the request")

// next is the EPP's next answer; an immediate response is an error.
func (r *Request) next(ctx context.Context) (*extprocv3.ProcessingResponse, error) {
	select {
	case got := <-r.responses:
		if got.err != nil {
			r.responses <- got // every later call sees the end too
			return nil, got.err
		}
		if ir := got.resp.GetImmediateResponse(); ir != nil {
			return nil, fmt.Errorf("%w: %s %s", errRefused, ir.GetStatus().GetCode(), ir.GetBody())
		}
		return got.resp, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Respond ends the request as Envoy does once the endpoint answered: the response
// headers (the status as `:status`, as Envoy sends it), then the response body with
// end of stream; it waits (until ctx ends) for the EPP's answers to both, and closes
// the request.
func (r *Request) Respond(ctx context.Context, status int, contentType string, body []byte) error {
	defer r.Abort()
	if err := r.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":status", RawValue: []byte(strconv.Itoa(status))},
			{Key: "content-type", RawValue: []byte(contentType)},
			{Key: "content-length", RawValue: []byte(strconv.Itoa(len(body)))},
		}}}}}); err != nil {
		return err
	}
	if err := r.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
		Body: body, EndOfStream: true}}}); err != nil {
		return err
	}
	// The EPP answers the headers, then the body (in chunks, the last with end of
	// stream) once it has processed the end of the response.
	for done := false; !done; {
		resp, err := r.next(ctx)
		if err != nil {
			return fmt.Errorf("the EPP's answer to the response: %w", err)
		}
		if b := resp.GetResponseBody(); b != nil {
			sr := b.GetResponse().GetBodyMutation().GetStreamedResponse()
			done = sr == nil || sr.GetEndOfStream()
		}
	}
	_ = r.stream.CloseSend()
	return nil
}

// Abort drops the request (a client that went away), and closes its connection if
// the request dialed it.
func (r *Request) Abort() {
	r.cancel()
	if r.conn != nil {
		_ = r.conn.Close()
	}
}

var requestIDs atomic.Int64

// Send sends a small completion request to the EPP at addr (127.0.0.1:<grpc port>)
// over plain gRPC (an EPP run with --secure-serving=false), on a connection of its
// own, and waits, up to 10 s, for the EPP's pick; the request stays open (in
// flight) until End or Abort.
func Send(addr string) (*Request, error) {
	return send(addr, insecure.NewCredentials())
}

// SendTLS is Send to an EPP that serves TLS (its default, with a certificate of its
// own making, which is not verified: the test reaches it through a port-forward).
func SendTLS(addr string) (*Request, error) {
	c, err := DialTLS(addr)
	if err != nil {
		return nil, err
	}
	return sendOn(c, addr)
}

func send(addr string, creds credentials.TransportCredentials) (*Request, error) {
	c, err := dial(addr, creds)
	if err != nil {
		return nil, err
	}
	return sendOn(c, addr)
}

// sendOn sends a small completion on c (to the EPP at addr) and keeps it in flight,
// on a connection of its own (closed with the request).
func sendOn(c *Client, addr string) (*Request, error) {
	body, _ := json.Marshal(map[string]any{"model": "test-model", "prompt": "hello", "max_tokens": 8})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Route(ctx, Call{Path: "/v1/completions", Body: body, ID: fmt.Sprintf("test-%d-%d", time.Now().UnixNano(), requestIDs.Add(1))})
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer from the EPP at %s within 10 s", addr)
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	r.conn = c.conn
	return r, nil
}

// End ends the request as Envoy does once the model server answered 200 with a
// small completion (within 5 s), and closes it.
func (r *Request) End() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.Respond(ctx, 200, "application/json",
		[]byte(`{"choices":[{"text":"hi"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
}
