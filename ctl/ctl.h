/*
 * ctl.h - what rowshiftctl's commands share: finding a running job, and
 * the commands that live in their own files.
 */
#ifndef RS_CTL_H
#define RS_CTL_H

#include "common/status.h"

/* A running job as its coordinator published it (--admin-file) or as given. */
typedef struct rs_ctl_job {
	char *url;           /* ws://HOST:PORT */
	char *token;         /* the join token, or NULL when not known */
	char *status_token;  /* the status stream's token, or NULL */
} rs_ctl_job;

/*
 * With url: that coordinator, the join token from ROWSHIFT_JOIN_TOKEN.
 * Without: read the admin file the coordinator writes (0600, {"url",
 * "token", "status_token"?, "tls_ca"?, "model"}): admin_file, or when NULL the one local job's
 * in this user's private directory (rs_file_private_dir "rowshift"); an
 * error says to check that one is running, or to pick one of several.
 */
rs_status rs_ctl_find_job(const char *admin_file, const char *url, rs_ctl_job *out, rs_err *err);
void rs_ctl_job_free(rs_ctl_job *j);

/* rowshiftctl status (ctl/status.c). */
int rs_ctl_status(int argc, char **argv);

#endif
