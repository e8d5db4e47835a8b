"""The command line: its commands, the local crawl and its private server, the state
directory, the progress line and the status view."""
