package peerfile

// Reads is how often the source has read its file (each reload reads it once).
func (s *Source) Reads() uint64 { return s.reads.Load() }
