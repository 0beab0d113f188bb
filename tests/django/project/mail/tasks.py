from tests.django.project.tasks_compat import task


@task()
def send_email(user_id: int) -> int:
    return user_id
