"""The command line: click commands that build configs and call optcli.api; errors become exit codes here."""
