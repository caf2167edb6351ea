"""The scheduler extender: filter, prioritize and bind over HTTP, state rebuilt from the API, leader election."""
