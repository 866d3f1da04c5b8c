"""Uses the client that openapi-python-client generated from /openapi.json to make a
payment, read it back and find it in the list: the document is only as good as the client
a stranger gets from it. Run by scripts/check-openapi.sh.

usage: openapi_client_smoke.py BASE_URL API_KEY   (the generated package on PYTHONPATH)
"""

import sys
import uuid
from http import HTTPStatus

from payments_api_client import AuthenticatedClient
from payments_api_client.api.payments import create_payment, get_payment, list_payments
from payments_api_client.models import CreatePaymentRequest, Payment, PaymentList, PaymentStatus


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
        fail(f"createPayment answered {created.status_code}: {created.content!r}")
    payment = created.parsed
    if payment.status != PaymentStatus.SUCCEEDED or payment.amount != 2000 or payment.currency != "usd":
        fail(f"createPayment made {payment.to_dict()}")
    print(f"createPayment: 201 {payment.id} {payment.status.value}")

    # The same key again is a replay of the first answer, and charges nothing more.
    replayed = create_payment.sync_detailed(client=client, body=request, idempotency_key=key)
    if replayed.status_code != HTTPStatus.CREATED or replayed.headers.get("idempotent-replayed") != "true":
        fail(f"the retry was not a replay: {replayed.status_code} {dict(replayed.headers)}")
    if not isinstance(replayed.parsed, Payment) or replayed.parsed.id != payment.id:
        fail(f"the replay names another payment: {replayed.content!r}")
    print(f"createPayment again: 201 Idempotent-Replayed: true, {replayed.parsed.id}")

    read = get_payment.sync_detailed(payment.id, client=client)
    if read.status_code != HTTPStatus.OK or not isinstance(read.parsed, Payment):
        fail(f"getPayment answered {read.status_code}: {read.content!r}")
    if read.parsed.to_dict() != payment.to_dict():
        fail(f"getPayment differs from what createPayment answered: {read.parsed.to_dict()}")
    print(f"getPayment: 200 {read.parsed.id} {read.parsed.status.value}")

    listed = list_payments.sync_detailed(client=client, limit=10, status=PaymentStatus.SUCCEEDED)
    if listed.status_code != HTTPStatus.OK or not isinstance(listed.parsed, PaymentList):
        fail(f"listPayments answered {listed.status_code}: {listed.content!r}")
    if payment.id not in [p.id for p in listed.parsed.data]:
        fail(f"listPayments does not show {payment.id}")
    print(f"listPayments: 200, {len(listed.parsed.data)} payment(s), {payment.id} among them")


if __name__ == "__main__":
    main()
