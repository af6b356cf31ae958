// Package otlpsink is a stand-in OpenTelemetry collector for tests: an OTLP/gRPC
// trace service on 127.0.0.1 that keeps what it receives (spans by trace ID and
// name, the resources that sent them), so a test can tell that an EPP exported its
// spans there.
package otlpsink

import (
	"context"
	"encoding/hex"
	"net"
	"sync"

	collectortracev1 "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// Span is one span received.
type Span struct {
	TraceID, Name string
	// Resource is its resource's attributes with string values (service.name,
	// k8s.pod.name, ...).
	Resource map[string]string
}

// Sink is a running stand-in collector.
type Sink struct {
	// Endpoint is its address as an OTLP exporter takes it: http://127.0.0.1:<port>
	// (plain text).
	Endpoint string

	collectortracev1.UnimplementedTraceServiceServer
	srv   *grpc.Server
	mu    sync.Mutex
	spans []Span
}

// Start starts a sink on a free port of 127.0.0.1.
func Start() (*Sink, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Sink{Endpoint: "http://" + l.Addr().String(), srv: grpc.NewServer()}
	collectortracev1.RegisterTraceServiceServer(s.srv, s)
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// Stop stops it.
func (s *Sink) Stop() { s.srv.Stop() }

// Export implements the OTLP trace service.
func (s *Sink) Export(_ context.Context, req *collectortracev1.ExportTraceServiceRequest) (*collectortracev1.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s.spans = append(s.spans, Span{TraceID: hex.EncodeToString(sp.GetTraceId()), Name: sp.GetName(), Resource: res})
			}
		}
	}
	return &collectortracev1.ExportTraceServiceResponse{}, nil
}

// Spans returns the spans received so far.
func (s *Sink) Spans() []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Span(nil), s.spans...)
}

// Trace returns the spans received so far of one trace (its ID in hex).
func (s *Sink) Trace(traceID string) []Span {
	var out []Span
	for _, sp := range s.Spans() {
		if sp.TraceID == traceID {
			out = append(out, sp)
		}
	}
	return out
}
