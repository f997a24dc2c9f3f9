module github.com/fastattn/fastattn

go 1.22

require github.com/klauspost/cpuid/v2 v2.3.0

require golang.org/x/sys v0.30.0
