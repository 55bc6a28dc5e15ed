"""`python -m rolltape.infra` runs the CLI (the same as the `rolltape` command)."""

from rolltape.infra.cli import main

main()
