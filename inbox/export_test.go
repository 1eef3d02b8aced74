package inbox

// The package's limits, unexported since v1, named for the tests.
const (
	MaxGroupLen             = maxGroupLen
	MaxTopicLen             = maxTopicLen
	MaxTagLen               = maxTagLen
	MaxMessageKeyLen        = maxMessageKeyLen
	MaxRefLen               = maxRefLen
	MaxResultCodeLen        = maxResultCodeLen
	MaxPayloadHashLen       = maxPayloadHashLen
	MaxResultPayloadBytes   = maxResultPayloadBytes
	MaxPurgeBatchSize       = maxPurgeBatchSize
	DefaultPurgeBatchSize   = defaultPurgeBatchSize
	MaxArchiveBatchSize     = maxArchiveBatchSize
	DefaultArchiveBatchSize = defaultArchiveBatchSize
	ConstraintClaimed       = constraintClaimed
	MaxClaimAttempts        = maxClaimAttempts
)
