"""The console: task views, the views service, the HTTP API and web page, `cardflow tasks/status/console`."""
