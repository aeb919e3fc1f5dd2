/*
 * data.c - picks the data source the config names (see data.h).
 */
#include "worker/data.h"
#include "worker/data_criteo.h"

rs_status rs_data_open(const rs_config *cfg, rs_data **out, rs_err *err)
{
	if (cfg->data.kind == RS_DATA_CRITEO)
		return rs_criteo_open(cfg, out, err);
	return rs_synth_open(cfg, out, err);
}
