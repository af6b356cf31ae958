package peersync

// load is shaped like llm-d-router's concurrency.InFlightLoad.
type load struct {
	Requests int64
	Tokens   int64
}

// loadV2 is another type, for a key whose values change type.
type loadV2 struct {
	Requests int32
	Tokens   int64
	Queued   uint16
}
