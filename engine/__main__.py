import sys

try:  # Ctrl-C while the command's modules still load ends as it does later: one line, status 130
    from .cli import main

    code = main()
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    code = 130
sys.exit(code)
