"""Uses the client that openapi-python-client generated from /openapi.json to make a
payment, read it back and find it in the list, then to register a webhook endpoint (a
receiver on a local port), have the service send it a test event, and parse what arrived:
the document is only as good as the client a stranger gets from it. Run by
scripts/check-openapi.sh (which lets webhook endpoints be local).

usage: openapi_client_smoke.py BASE_URL API_KEY   (the generated package on PYTHONPATH)
"""

import json
import sys
import threading
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer

from payments_api_client import AuthenticatedClient
from payments_api_client.api.payments import create_payment, get_payment, list_payments
from payments_api_client.api.webhook_endpoints import create_webhook_endpoint, test_webhook_endpoint
from payments_api_client.models import (
    CreatePaymentRequest,
    CreateWebhookEndpointRequest,
    Event,
    Payment,
    PaymentList,
    PaymentStatus,
    TestResult,
    WebhookEndpoint,
)


def fail(message: str) -> None:
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def main() -> None:
    base_url, api_key = sys.argv[1], sys.argv[2]
    client = AuthenticatedClient(base_url=base_url, token=api_key, raise_on_unexpected_status=True)
    key = f"openapi-check-{uuid.uuid4().hex}"
    request = CreatePaymentRequest(amount=2000, currency="USD", payment_method="pm_card_visa")

    created = create_payment.sync_detailed(client=client, body=request, idempotency_key=key)
    if created.status_code != HTTPStatus.CREATED or not isinstance(created.parsed, Payment):
        fail(f"create_payment answered {created.status_code}: {created.content!r}")
    payment = created.parsed
    if payment.status != PaymentStatus.SUCCEEDED or payment.amount != 2000 or payment.currency != "usd":
        fail(f"create_payment made {payment.to_dict()}")
    print(f"create_payment: 201 {payment.id} {payment.status.value}")

    # The same key again is a replay of the first answer, and charges nothing more.
    replayed = create_payment.sync_detailed(client=client, body=request, idempotency_key=key)
    if replayed.status_code != HTTPStatus.CREATED or replayed.headers.get("idempotent-replayed") != "true":
        fail(f"the retry was not a replay: {replayed.status_code} {dict(replayed.headers)}")
    if not isinstance(replayed.parsed, Payment) or replayed.parsed.id != payment.id:
        fail(f"the replay names another payment: {replayed.content!r}")
    print(f"create_payment again: 201 Idempotent-Replayed: true, {replayed.parsed.id}")

    read = get_payment.sync_detailed(payment.id, client=client)
    if read.status_code != HTTPStatus.OK or not isinstance(read.parsed, Payment):
        fail(f"get_payment answered {read.status_code}: {read.content!r}")
    if read.parsed.to_dict() != payment.to_dict():
        fail(f"get_payment differs from what create_payment answered: {read.parsed.to_dict()}")
    print(f"get_payment: 200 {read.parsed.id} {read.parsed.status.value}")

    listed = list_payments.sync_detailed(client=client, limit=10, status=PaymentStatus.SUCCEEDED)
    if listed.status_code != HTTPStatus.OK or not isinstance(listed.parsed, PaymentList):
        fail(f"list_payments answered {listed.status_code}: {listed.content!r}")
    if payment.id not in [p.id for p in listed.parsed.data]:
        fail(f"list_payments does not show {payment.id}")
    print(f"list_payments: 200, {len(listed.parsed.data)} payment(s), {payment.id} among them")

    check_test_delivery(client)


class Receiver(BaseHTTPRequestHandler):
    """Keeps the body of each POST it gets, and answers 204."""

    bodies: list = []

    def do_POST(self) -> None:  # noqa: N802 (the name http.server calls)
        length = int(self.headers.get("Content-Length", "0"))
        Receiver.bodies.append(self.rfile.read(length))
        self.send_response(HTTPStatus.NO_CONTENT)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def check_test_delivery(client: AuthenticatedClient) -> None:
    """The test event a receiver gets parses as the document's Event."""
    server = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        request = CreateWebhookEndpointRequest(url=url, enabled_events=["payment.succeeded"])
        created = create_webhook_endpoint.sync_detailed(client=client, body=request)
        if created.status_code != HTTPStatus.CREATED or not isinstance(created.parsed, WebhookEndpoint):
            fail(f"create_webhook_endpoint answered {created.status_code}: {created.content!r}")
        endpoint = created.parsed
        tested = test_webhook_endpoint.sync_detailed(endpoint.id, client=client)
        if tested.status_code != HTTPStatus.OK or not isinstance(tested.parsed, TestResult):
            fail(f"test_webhook_endpoint answered {tested.status_code}: {tested.content!r}")
        if not tested.parsed.delivered or len(Receiver.bodies) != 1:
            fail(f"the test event was not delivered: {tested.content!r}")
    finally:
        server.shutdown()
    event = Event.from_dict(json.loads(Receiver.bodies[0]))
    if event.type_.value != "webhook_endpoint.test":
        fail(f"the test delivery parsed as {event.to_dict()}")
    print(f"test_webhook_endpoint: delivered, parsed as Event {event.id} of type {event.type_.value}")


if __name__ == "__main__":
    main()
