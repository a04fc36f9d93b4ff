"""`python -m optcli`: the same entry point as the `optcli` console script."""
from optcli.cli.main import main

if __name__ == "__main__":
    main()
