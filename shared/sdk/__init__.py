"""The producer SDK: what a chat backend or an event bridge needs to send ragline tasks (client, async
client, answer stream, contracts, names, signing). ``import ragline`` loads this and the settings only."""
