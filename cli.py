"""The checkout's entry file (`python cli.py ...`): the command line itself lives in the package
`tosca_cli`, which the installed `tosca` command runs too."""

from tosca_cli.app import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
