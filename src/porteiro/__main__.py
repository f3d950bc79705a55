"""`python -m porteiro`: the same as the `porteiro` console script."""

from porteiro.cli import main

if __name__ == "__main__":
    main()
