"""The CAS server's directory: accounts and their attributes read from a JSON file at each login
(`{"2023010001": {"password": "…", "attributes": {…}}}`), so a test can change a student's
identity type between two logins as the campus directory would."""

import json
import os

from cas_server.auth import AuthUser


def _accounts() -> dict:
    with open(os.environ["TESTKIT_CAS_ACCOUNTS"], encoding="utf-8") as fh:
        return json.load(fh)


class FileAuthUser(AuthUser):
    def test_password(self, password: str) -> bool:
        account = _accounts().get(self.username)
        return account is not None and account["password"] == password

    def attributs(self) -> dict:
        return dict(_accounts().get(self.username, {}).get("attributes", {}))
