//go:build !linux

package saratoga

const gsoSupported = false

var gsoCmsgLen = 0

func putGSOCmsg(b []byte, _ int) []byte { return b[:0] }
