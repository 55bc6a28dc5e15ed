"""rolltape.infra.commands: one module per CLI verb, named after it, that wires settings, Kafka
and the pure packages into what the verb does.

The CLI (`rolltape.infra.cli`) parses arguments, calls one of these and prints what it returns;
these never print (long-running ones report through callbacks) and raise the package roots the
CLI's one error boundary turns into a line and exit 2. Benchmarks and tests call them directly.
"""
