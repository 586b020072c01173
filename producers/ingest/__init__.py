"""HTTP ingest: ``tracehound ingest`` takes errors from log shippers (events.py), error SDKs
(sdk_routes.py) and Slack's button presses (slack_routes.py); server.py builds the app."""
