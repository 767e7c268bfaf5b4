"""What a user of a speechstream server installs (the `speechstream-client` distribution):
protocol v1's vocabulary (`protocol`), the client library and its command-line tools
(`client`), the audio containers they read and write (`media`), and the voice-agent
framework plugins. Nothing here imports the server's packages."""
