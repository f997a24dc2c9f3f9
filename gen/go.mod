module github.com/fastattn/fastattn/gen

go 1.26.0

replace github.com/fastattn/fastattn => ..

require (
	github.com/fastattn/fastattn v0.0.0-00010101000000-000000000000
	github.com/mmcloughlin/avo v0.6.0
)

require (
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/tools v0.52.0 // indirect
)
