import sys

try:
    from plnt_cli.main import main
except KeyboardInterrupt:  # Ctrl-C while Python loads the CLI: nothing was started yet
    sys.exit(130)

main()
