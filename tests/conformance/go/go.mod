module rolltape.local/conformance

go 1.21
