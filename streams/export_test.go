package streams

// SameStream exposes sameStream to the tests.
var SameStream = sameStream
